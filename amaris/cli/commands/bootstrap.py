"""``amaris bootstrap``: an initial adaptive rubric from ranked examples
(:mod:`amaris.cli.bootstrap`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from amaris.cli.common import CONFIG, SubParsers, command


def _count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"{value} is outside 1-10000")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} is outside [0, 1)")
    return value


def register(sub: SubParsers) -> None:
    """Add ``bootstrap``."""
    parser = command(
        sub,
        "bootstrap",
        "amaris.cli.bootstrap:run_bootstrap",
        parents=[CONFIG],
        help="propose an initial adaptive rubric from prompts with ranked responses",
    )
    parser.add_argument(
        "--data",
        type=Path,
        required=True,
        help="ranked examples, Reward Harness format: {prompts: [{prompt_id, prompt, "
        "candidates: [{candidate_id, text, metadata: {rank}}]}]}",
    )
    parser.add_argument("--out", type=Path, default=Path("bootstrap-report"), help="report folder")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split and search")
    parser.add_argument("--generations", type=_count, default=40, help="search generations")
    parser.add_argument("--population", type=_count, default=8, help="rubrics kept per generation")
    parser.add_argument(
        "--holdout", type=_share, default=0.25, help="share of prompts held out (default 0.25)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="write the report only; publish no version"
    )
