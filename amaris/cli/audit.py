"""``amaris audit ack|status``: the fidelity alarm's pause (``audit.on_alarm: pause``;
docs/fidelity.md); declared in :mod:`amaris.cli.commands.audit`."""

from __future__ import annotations

import argparse
from pathlib import Path

from amaris.cli.config import load
from amaris.trust.audit.pause import AuditPause


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
