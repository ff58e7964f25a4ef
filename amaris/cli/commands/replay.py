"""``amaris replay``: the rubric evolution re-run over recorded rollouts under each memory
mode (:mod:`amaris.cli.replay`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from amaris.cli.commands.simulate import MODES
from amaris.cli.common import CONFIG, SubParsers, command

MEMORY_MODES = tuple(MODES)
"""The memory modes ``amaris replay`` compares (see docs/simulation.md)."""


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MEMORY_MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(
            f"unknown memory mode {', '.join(map(repr, unknown)) or repr(text)} "
            f"(known: {', '.join(MEMORY_MODES)})"
        )
    if len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"a memory mode is repeated in {text!r}")
    return modes


def register(sub: SubParsers) -> None:
    """Add ``replay``."""
    parser = command(
        sub,
        "replay",
        "amaris.cli.replay:replay",
        parents=[CONFIG],
        help="re-run the evolution over recorded rollouts under each memory mode",
    )
    parser.add_argument(
        "rollouts",
        type=Path,
        nargs="?",
        default=None,
        metavar="ROLLOUTS.jsonl",
        help="rollout-log records, as `amaris export` writes them (default with --manifest: "
        "the rollouts of the simulate run it describes)",
    )
    parser.add_argument(
        "--manifest",
        type=Path,
        default=None,
        help="a run manifest (manifest-*.json, or a report's manifest.json): replay under "
        "its configuration (secrets from the environment) and record its seed",
    )
    parser.add_argument(
        "--modes",
        type=_modes,
        default=list(MEMORY_MODES),
        help="comma-separated memory modes (default none,static,dynamic,both)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("replay-report"),
        help="report folder (default ./replay-report)",
    )
