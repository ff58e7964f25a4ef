"""``amaris audit ack|status``: the fidelity alarm's pause of scoring (:mod:`amaris.cli.audit`)."""

from __future__ import annotations

from pathlib import Path

from amaris.cli.common import CONFIG, SubParsers, command


def register(sub: SubParsers) -> None:
    """Add ``audit ack`` and ``audit status``."""
    group = sub.add_parser("audit", help="the fidelity alarm's pause of scoring")
    inner = group.add_subparsers(dest="audit_command", required=True)
    for name, handler, text in (
        (
            "ack",
            "amaris.cli.audit:ack",
            "acknowledge the fidelity alarm that paused scoring: scoring resumes",
        ),
        ("status", "amaris.cli.audit:status", "whether a fidelity alarm paused scoring"),
    ):
        parser = command(inner, name, handler, parents=[CONFIG], help=text)
        parser.add_argument(
            "--data", type=Path, default=None, help="data folder (default: memory.path)"
        )
