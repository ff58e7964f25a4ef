"""Share of GRPO groups with zero reward variance, with sharper rewards off and on.

Runs ``amaris simulate`` (each run starts its own ``amaris serve`` with the offline judge,
stopped by PID at the end) once per variant of ``agents.scorer``: plain verdicts, sampled
ones at temperature 1 (noise alone), ``samples: K`` at temperature 1, ``logprobs``, and
both. The policy answers each task ``--group-size`` times (a GRPO group: the same prompt);
a group whose rewards are all equal has zero advantages and teaches nothing. The offline
judge's doubt (``amaris/offline/sampling.py``: seeded, pseudo-random, not a measure of the
response) stands in for an LLM judge's uncertainty, so the figures show what the options do
to ties, not how good an LLM's expected scores are.

Usage::

    .venv/bin/python -m bench.evaluations.zero_variance [--steps 10] [--rollouts-per-step 64]
        [--group-size 8] [--samples 4] [--seed 0] [--write] [--smoke]

``--write`` replaces this benchmark's section of ``docs/benchmarks.md``. ``--smoke``: the last
variant alone (it sets every option of the others), one step of 8 rollouts in groups of 4,
``samples: 2``, the hashing embedder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench._common import ROOT, doc_section, markers, write_doc

MARK_START, MARK_END = markers("zero_variance")
SMOKE = {"steps": 1, "rollouts_per_step": 8, "group_size": 4, "samples": 2}


def variants(k: int) -> list[tuple[str, dict[str, Any]]]:
    """(label, ``agents.scorer`` options) of each run."""
    return [
        ("plain (default)", {}),
        ("temperature 1, samples 1", {"temperature": 1.0}),
        (f"samples {k}, temperature 1", {"temperature": 1.0, "samples": k}),
        ("logprobs", {"logprobs": True}),
        (
            f"samples {k} + logprobs, temperature 1",
            {"temperature": 1.0, "samples": k, "logprobs": True},
        ),
    ]


def run(
    label: str, scorer: dict[str, Any], args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    """One ``amaris simulate`` with ``agents.scorer`` = ``scorer``; its figures."""
    slug = "".join(c if c.isalnum() else "-" for c in label)
    config = folder / f"{slug}.yaml"
    settings: dict[str, Any] = {"agents": {"scorer": scorer}} if scorer else {}
    if args.smoke:
        settings["memory"] = {"embedding_model": "hashing"}
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    out = folder / slug
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "amaris.cli.main",
            "simulate",
            "--config",
            str(config),
            "--steps",
            str(args.steps),
            "--rollouts-per-step",
            str(args.rollouts_per_step),
            "--group-size",
            str(args.group_size),
            "--seed",
            str(args.seed),
            "--out",
            str(out),
        ],
        check=True,
        cwd=folder,
        stdin=subprocess.DEVNULL,
    )
    wall = time.monotonic() - started
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    overall = metrics["runs"]["simulate"]["overall"]
    steps = metrics["runs"]["simulate"]["steps"]
    return {
        "label": label,
        "groups": overall["groups"],
        "mean_reward": overall["mean_reward"],
        "unscored": overall["unscored"],
        "wall_s": wall,
        "first": steps[0]["groups"],
        "last": steps[-1]["groups"],
    }


def _share(groups: dict[str, Any]) -> str:
    if not groups["groups"]:
        return "-"
    return f"{groups['zero_variance']}/{groups['groups']} ({groups['share']:.0%})"


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "| agents.scorer | zero-variance groups, all steps | first step | last step "
        "| mean reward | unscored | wall |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {_share(r['groups'])} | {_share(r['first'])} | "
            f"{_share(r['last'])} | {r['mean_reward']:.3f} | {r['unscored']} | "
            f"{r['wall_s']:.0f} s |"
        )
    return doc_section(
        "zero_variance",
        "Zero-variance GRPO groups with sharper rewards",
        f"`amaris simulate` ({args.steps} steps x {args.rollouts_per_step} rollouts in groups "
        f"of {args.group_size} per prompt, seed {args.seed}, offline judge) once per "
        "`agents.scorer` variant; a group has zero variance when all its rewards are equal. "
        "The offline judge's doubt is seeded noise, not a judgement: the figures show what "
        "the options do to ties, not the quality of the rewards; mean rewards are not "
        "comparable across rows.",
        "\n".join(lines),
        script=__file__,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rollouts-per-step", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--write", action="store_true", help="write the section of docs/benchmarks.md"
    )
    parser.add_argument("--smoke", action="store_true", help="one variant, one step of 8")
    args = parser.parse_args(argv)
    if args.smoke and args.write:
        parser.error("--smoke: its figures do not go to docs/benchmarks.md")
    if args.smoke:
        vars(args).update(SMOKE)
    runs = variants(args.samples)[-1:] if args.smoke else variants(args.samples)
    rows = []
    with tempfile.TemporaryDirectory(prefix="amaris-bench-zv-") as tmp:
        for label, scorer in runs:
            row = run(label, scorer, args, Path(tmp))
            print(row, flush=True)
            rows.append(row)
    text = report(rows, args)
    print(text)
    if args.write:
        write_doc(ROOT / "docs" / "benchmarks.md", text, MARK_START, MARK_END)


if __name__ == "__main__":
    main()
