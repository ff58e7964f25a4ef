"""Judge calls avoided by rule criteria (and the pre-check) in ``amaris simulate``.

Runs ``amaris simulate`` (its own ``amaris serve``, offline judge, stopped by PID) once per
rubric and prints ``metrics.json``'s ``judge_calls`` (``amaris/sim/judge_calls.py``):

* ``judge only``: the default rubric (one judged anchor);
* ``mixed``: a numeric rule and a length rule beside a judged anchor;
* ``rule anchors``: the two rules as the only anchors; the updater's adaptive criteria
  (judged) join as the run goes.

Usage::

    .venv/bin/python -m bench.evaluations.rule_criteria [--steps 6] [--rollouts-per-step 32]
        [--seed 0] [--smoke]

``--smoke``: the ``mixed`` rubric alone (it holds every criterion of the others), one step of
4 rollouts, the hashing embedder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

NUMERIC = {"text": "The final answer equals the reference answer.", "rule": {"kind": "numeric"}}
LENGTH = {
    "text": "The response is at most 400 characters long.",
    "weight": 0.25,
    "rule": {"kind": "length", "max_chars": 400},
}
JUDGED = {"text": "The response gives the correct final answer.", "weight": 1.0}
RUBRICS: dict[str, dict[str, Any]] = {
    "judge only": {},
    "mixed": {"anchor_rubrics": [NUMERIC, LENGTH, JUDGED]},
    "rule anchors": {"anchor_rubrics": [NUMERIC, LENGTH]},
}
SMOKE_RUBRIC = "mixed"
SMOKE = {"steps": 1, "rollouts_per_step": 4}


def run(label: str, config: dict[str, Any], args: argparse.Namespace, folder: Path) -> Any:
    slug = label.replace(" ", "-")
    path = folder / f"{slug}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    out = folder / slug
    subprocess.run(
        [
            sys.executable, "-m", "amaris.cli.main", "simulate", "--config", str(path),
            "--steps", str(args.steps), "--rollouts-per-step", str(args.rollouts_per_step),
            "--seed", str(args.seed), "--out", str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return json.loads((out / "metrics.json").read_text(encoding="utf-8"))["judge_calls"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rollouts-per-step", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="one rubric, one step of 4 rollouts")
    args = parser.parse_args(argv)
    rubrics = RUBRICS
    if args.smoke:
        vars(args).update(SMOKE)
        hashing = {"memory": {"embedding_model": "hashing"}}
        rubrics = {SMOKE_RUBRIC: {**RUBRICS[SMOKE_RUBRIC], **hashing}}
    print("| rubric | scored | judged | rule only | degenerate | judge calls avoided "
          "| verdicts by rules |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="amaris-bench-rules-") as tmp:
        for label, config in rubrics.items():
            c = run(label, config, args, Path(tmp))
            print(
                f"| {label} | {c['scored']} | {c['judged']} | {c['rule_only']} | "
                f"{c['degenerate']} | {c['avoided_share']:.1%} | "
                f"{c['rule_verdict_share']:.1%} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
