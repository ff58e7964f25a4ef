"""``amaris manifest``: the run manifests in a data folder (:mod:`amaris.manifest`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from amaris.cli.common import CommandError
from amaris.cli.config import load
from amaris.manifest import ManifestError, manifests, markdown, read_manifest


def show(args: argparse.Namespace) -> int:
    """Print the newest manifest (or ``--list`` every one) of the data folder."""
    settings = load(args)
    folder: Path = args.data or settings.memory.path
    found = manifests(folder)
    if not found:
        raise CommandError(
            f"no run manifest in {folder} (written by serve, simulate, replay, bootstrap)", 1
        )
    if args.list:
        for path in found:
            print(path)
        return 0
    try:
        manifest = read_manifest(found[-1])
    except ManifestError as exc:
        raise CommandError(str(exc), 1) from exc
    print(json.dumps(manifest, indent=2, ensure_ascii=False) if args.json else markdown(manifest))
    return 0
