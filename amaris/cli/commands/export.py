"""``amaris export``: the rollout log as JSONL (:mod:`amaris.cli.export`)."""

from __future__ import annotations

from amaris.cli.common import STORE, SubParsers, command


def register(sub: SubParsers) -> None:
    """Add ``export``."""
    parser = command(
        sub,
        "export",
        "amaris.cli.export:export",
        parents=[STORE],
        help="write the rollout log as JSONL",
    )
    parser.add_argument("--out", default="-", help="file to write (default -: stdout)")
