"""What a tree offers its users: the API's operations, the configuration's keys and the
CLI's commands and options; dumped for one tree, compared between two.

Target: no endpoint, CLI command or config key lost across a refactor. Dump the tree on the
path (this checkout, or another tree's packages put first with
``PYTHONPATH=<folder>:<this checkout> ... -P``: a folder holding only its ``amaris``,
``api``, ``flows``, ``tasks`` and ``deployments``, so ``bench`` and ``tests.support`` come
from here), then compare::

    PYTHONPATH=/tmp/oldpkgs:. .venv/bin/python -P -m bench.evaluations.surface --dump /tmp/old.json
    .venv/bin/python -m bench.evaluations.surface --dump /tmp/new.json
    .venv/bin/python -m bench.evaluations.surface --compare /tmp/old.json /tmp/new.json

``--smoke`` dumps this tree into a temporary file and compares it with itself.

The operations come from the app's OpenAPI document (built, not started), the keys from
walking the settings model (``tests.support.settings_keys``, as the configuration
reference's test does), the commands and options from each command's
``--help`` (run in a child process, as a user would).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import typing
from pathlib import Path

from amaris.app.wiring import create_app
from amaris.settings import Settings
from tests.support.settings_keys import dotted_keys

CLI = [sys.executable, "-P", "-m", "amaris.cli.main"]
"""The CLI as a user runs it, from the tree on the path (``-P``: not the current folder)."""


def operations() -> list[str]:
    """``METHOD /path`` of every operation of the API."""
    paths = create_app(Settings(), qdrant_location=":memory:").openapi()["paths"]
    return sorted(f"{method.upper()} {path}" for path, ops in paths.items() for method in ops)


def keys() -> list[str]:
    """Dotted paths of the settings' keys, every agent's spelled out (a removed agent's
    section shows)."""
    return sorted(dotted_keys(Settings))


def _help(args: list[str]) -> str:
    run = subprocess.run(
        [*CLI, *args, "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    return run.stdout


def commands(args: list[str] | None = None) -> dict[str, list[str]]:
    """Each command and subcommand with the options its ``--help`` names."""
    args = args or []
    text = _help(args)
    found = {" ".join(args) or "amaris": sorted(set(re.findall(r"--[a-z][a-z0-9-]*", text)))}
    group = re.search(r"\{([a-z,-]+)\}\s*\.\.\.", text)
    if group and len(args) < 2:
        for name in group.group(1).split(","):
            found.update(commands([*args, name]))
    return found


def compare(old: dict[str, typing.Any], new: dict[str, typing.Any]) -> list[str]:
    """Lines saying what ``new`` lacks of ``old`` and what it adds."""
    lines = []
    for part in ("operations", "keys"):
        gone = sorted(set(old[part]) - set(new[part]))
        added = sorted(set(new[part]) - set(old[part]))
        lines.append(f"{part}: {len(old[part])} -> {len(new[part])}, removed {len(gone)} {gone}")
        lines.append(f"  added {len(added)}" + (f": {added}" if part == "operations" else ""))
    gone = sorted(set(old["commands"]) - set(new["commands"]))
    added = sorted(set(new["commands"]) - set(old["commands"]))
    options = sum(len(v) for v in old["commands"].values())
    lines.append(
        f"commands: {len(old['commands'])} -> {len(new['commands'])}, removed {gone}, added {added}"
    )
    lost = {
        name: sorted(set(flags) - set(new["commands"].get(name, [])))
        for name, flags in old["commands"].items()
        if name in new["commands"]
    }
    lost = {name: flags for name, flags in lost.items() if flags}
    lines.append(f"options of the old commands: {options}, removed {lost or 'none'}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, help="write this tree's surface as JSON")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--smoke", action="store_true", help="dump, then compare with itself")
    args = parser.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="amaris-surface-") as tmp:
            dump = Path(tmp) / "surface.json"
            main(["--dump", str(dump), "--compare", str(dump), str(dump)])
        return
    if args.dump:
        surface = {"operations": operations(), "keys": keys(), "commands": commands()}
        args.dump.write_text(json.dumps(surface, indent=1), encoding="utf-8")
    if args.compare:
        old, new = (json.loads(p.read_text(encoding="utf-8")) for p in args.compare)
        print("\n".join(compare(old, new)))


if __name__ == "__main__":
    main()
