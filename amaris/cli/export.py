"""``amaris export``: the rollout log as JSONL (what ``amaris replay`` reads)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from amaris.cli.common import CommandError
from amaris.cli.config import load
from amaris.cli.reported import reported
from amaris.cli.store import api_records
from amaris.memory.qdrant import StoreLockedError, open_qdrant
from amaris.sim.records import local_records


def export(args: argparse.Namespace) -> int:
    """Write the rollout log as JSONL (one record a line, by step then arrival)."""
    with reported("export"):
        settings = load(args)
        try:
            client = open_qdrant(settings.memory)
        except StoreLockedError:
            records = [record.to_json() for record in api_records(settings, args.url)]
        else:
            try:
                records = [record.to_json() for record in local_records(client, settings)]
            finally:
                client.close()
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        if str(args.out) == "-":
            sys.stdout.write(lines)
        else:
            try:
                Path(args.out).write_text(lines, encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"--out {args.out}: {exc.strerror or exc}") from exc
            steps = len({r["step"] for r in records})
            print(
                f"{len(records)} rollouts of {steps} steps written to {args.out}", file=sys.stderr
            )
        return 0
