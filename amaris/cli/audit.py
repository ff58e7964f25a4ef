"""``amaris audit``: the fidelity alarm's pause (``audit.on_alarm: pause``; docs/fidelity.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from amaris.audit.pause import AuditPause
from amaris.cli.common import CONFIG, SubParsers, command, load


def _pause(args: argparse.Namespace) -> AuditPause:
    folder: Path = args.data or load(args).memory.path
    return AuditPause(folder)


def ack(args: argparse.Namespace) -> int:
    """Acknowledge the alarm that paused scoring: ``/score`` answers again (a running
    server sees it at its next request: the pause is a file in the data folder)."""
    record = _pause(args).ack()
    if record is None:
        print("scoring is not paused: nothing to acknowledge")
    else:
        print(f"acknowledged the fidelity alarm of step {record.step}: {record.reason}")
        print("scoring resumes")
    return 0


def status(args: argparse.Namespace) -> int:
    """Say whether a fidelity alarm paused scoring (exit 1 when paused)."""
    record = _pause(args).current()
    if record is None:
        print("scoring runs (no fidelity alarm pause)")
        return 0
    print(f"scoring PAUSED by the fidelity alarm of step {record.step}: {record.reason}")
    return 1


def register(sub: SubParsers) -> None:
    """Add ``audit ack`` and ``audit status``."""
    group = sub.add_parser("audit", help="the fidelity alarm's pause of scoring")
    inner = group.add_subparsers(dest="audit_command", required=True)
    for name, run, text in (
        ("ack", ack, "acknowledge the fidelity alarm that paused scoring: scoring resumes"),
        ("status", status, "whether a fidelity alarm paused scoring"),
    ):
        parser = command(inner, name, run, parents=[CONFIG], help=text)
        parser.add_argument(
            "--data", type=Path, default=None, help="data folder (default: memory.path)"
        )
