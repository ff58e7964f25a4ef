"""Training-loop overhead of rubric evolution: a simulated trainer with a fixed compute time
per step, scoring through amaris in async mode, with and without the step pipeline.

Starts two processes it owns, bound to 127.0.0.1 on free ports, and stops them by PID at
the end (also on error or Ctrl-C):

* ``amaris offline-llm --latency-ms L``: the rule-based judge behind an OpenAI-compatible
  API, sleeping ``L`` ms per request (a stand-in for an LLM judge; 1000 ms by default);
* ``amaris serve`` with every agent on it, ``pipeline.mode: async``, manual step
  completion (``pipeline.rollouts_per_step: null``), the default MiniLM embedder,
  ``logging.level: WARNING``, no scheduled repair, its Prefect server on a free port.

The trainer (this process) runs steps of: write ``--rollouts`` rollouts (the simulated
policy of ``amaris simulate``, reading the rubric in force), score them with concurrent
``/score`` calls (``RewardClient``), then compute for ``--compute-s`` seconds (a sleep:
the GPU's work). Two variants of the same loop, in the same run, on the same server:

* **evolution on**: after scoring, ``POST /complete`` for the step; its pipeline (analyses,
  summary, memory, rubric update) runs in the background while the trainer computes, and
  the next step is scored under whatever rubric is in force then (async mode);
* **evolution off**: no ``/complete``: steps never complete, no pipeline runs, the rubric
  stays as it is. amaris is then a plain reward service.

Blocks of ``--steps`` steps alternate off/on, on/off (``--repeats`` pairs) so that drifting
load on the machine hits both variants alike; after an "on" block the trainer waits for
its last step's pipeline (the drain, reported apart: in a real run it overlaps the end of
training) so that it cannot run into the next block. A warm-up step with ``/complete``
runs first (Prefect's boot, MiniLM's first load).

Reported: per-step wall time of each variant (scoring + ``/complete`` + compute), the
added wall time per step (on - off), its share of the off step time, and where it comes
from (scoring time, the ``/complete`` call). Target: at most 1% added wall time per step.
Results are printed and written between the ``loop_overhead`` markers of
``docs/benchmarks.md``.

Usage::

    .venv/bin/python -m bench.performance.loop_overhead [--steps 5] [--repeats 2] [--rollouts 64]
        [--compute-s 15] [--latency-ms 1000] [--keep DIR] [--out docs/benchmarks.md] [--smoke]

``--smoke``: one step per block, one pair, 2 rollouts, no compute, LLM calls of 0 ms, the
hashing embedder.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from amaris.client import RewardClient
from amaris.sim.policy import Policy
from bench._common import (
    Child,
    doc_section,
    loadavg,
    markers,
    raise_interrupt,
    report_path,
    running_stack,
    settle,
    work_folder,
    write_doc,
)

MARK_START, MARK_END = markers("loop_overhead")
TARGET_OVERHEAD = 0.01
"""Added wall time per step at most this share of the step without evolution."""
WARMUP_STEP = 0
SEED = 0
SMOKE = {"steps": 1, "repeats": 1, "rollouts": 2, "compute_s": 0.0, "latency_ms": 0.0}


@dataclass
class StepTiming:
    step: int
    scoring_s: float
    complete_s: float
    total_s: float
    rubric_version: int


@dataclass
class Block:
    variant: str
    steps: list[StepTiming] = field(default_factory=list)
    drain_s: float = 0.0


async def train_step(
    client: RewardClient,
    http: httpx.AsyncClient,
    policy: Policy,
    step: int,
    evolve: bool,
    compute_s: float,
) -> StepTiming:
    """One trainer step: score the step's rollouts, (complete it), compute."""
    t0 = time.perf_counter()
    rubric = (await http.get("/rubrics")).json()
    planned = policy.rollouts(step, rubric)
    rewards = await asyncio.gather(*(client.score_async(p.rollout, p.metadata) for p in planned))
    t1 = time.perf_counter()
    if evolve:
        await client.rollouts_complete_async(step)
    t2 = time.perf_counter()
    await asyncio.sleep(compute_s)
    total = time.perf_counter() - t0
    assert len(rewards) == len(planned)
    return StepTiming(step, t1 - t0, t2 - t1, total, int(rubric["version"]))


async def measure(url: str, amaris: Child, args: argparse.Namespace) -> list[Block]:
    async with (
        RewardClient(url, timeout=600) as client,
        httpx.AsyncClient(base_url=url, timeout=600) as http,
    ):
        # Correct answers only: the warm-up leaves the rubric as configured (v1).
        warm = Policy(SEED, args.rollouts, args.steps, learning_rate=0.0, mix={"correct": 1.0})
        t0 = time.perf_counter()
        await train_step(client, http, warm, WARMUP_STEP, True, 0.0)
        await client.rubric_updated_async(WARMUP_STEP, timeout=600)
        print(f"warm-up step done in {time.perf_counter() - t0:.1f} s", flush=True)
        await asyncio.to_thread(settle, amaris, after_startup=False)
        order = []
        for pair in range(args.repeats):
            order += ["off", "on"] if pair % 2 == 0 else ["on", "off"]
        blocks: list[Block] = []
        for index, variant in enumerate(order):
            # Each block a fresh policy (same seed) on its own range of steps.
            policy = Policy(SEED, args.rollouts, args.steps, learning_rate=2.0)
            first = 100 * (index + 1)
            block = Block(variant)
            for offset in range(args.steps):
                timing = await train_step(
                    client, http, policy, first + offset, variant == "on", args.compute_s
                )
                block.steps.append(timing)
                print(
                    f"  {variant:>3} step {timing.step}: {timing.total_s:.3f} s (scoring "
                    f"{timing.scoring_s:.3f} s, /complete {timing.complete_s * 1000:.1f} ms)",
                    flush=True,
                )
            if variant == "on":
                t0 = time.perf_counter()
                await client.rubric_updated_async(first + args.steps - 1, timeout=600)
                block.drain_s = time.perf_counter() - t0
            blocks.append(block)
        return blocks


def _steps(blocks: list[Block], variant: str) -> list[StepTiming]:
    return [s for b in blocks if b.variant == variant for s in b.steps]


def summary_rows(blocks: list[Block]) -> tuple[list[tuple[str, str, str]], float, float]:
    """Figures table rows (figure, off, on), the added seconds per step and its share."""
    off, on = _steps(blocks, "off"), _steps(blocks, "on")

    def stat(items: list[StepTiming], what: str) -> list[float]:
        return [getattr(s, what) for s in items]

    added = statistics.mean(stat(on, "total_s")) - statistics.mean(stat(off, "total_s"))
    share = added / statistics.mean(stat(off, "total_s"))
    rows = [("steps measured", str(len(off)), str(len(on)))]
    for what, label in (
        ("total_s", "step wall time"),
        ("scoring_s", "scoring the rollouts"),
        ("complete_s", "`POST /complete`"),
    ):
        for name, fn in (("mean", statistics.mean), ("median", statistics.median)):
            rows.append(
                (f"{label}, {name} (s)", f"{fn(stat(off, what)):.3f}", f"{fn(stat(on, what)):.3f}")
            )
        rows.append(
            (
                f"{label}, min / max (s)",
                f"{min(stat(off, what)):.3f} / {max(stat(off, what)):.3f}",
                f"{min(stat(on, what)):.3f} / {max(stat(on, what)):.3f}",
            )
        )
    versions = sorted({s.rubric_version for s in on})
    rows.append(
        (
            "rubric versions the steps were scored under",
            ", ".join(sorted({f"v{s.rubric_version}" for s in off})),
            ", ".join(f"v{v}" for v in versions),
        )
    )
    drains = [b.drain_s for b in blocks if b.variant == "on"]
    rows.append(
        (
            'drain: last step\'s pipeline after an "on" block (s, not in step times)',
            "-",
            " / ".join(f"{d:.2f}" for d in drains),
        )
    )
    return rows, added, share


DOC_ROWS = (
    "steps measured",
    "step wall time, mean (s)",
    "step wall time, median (s)",
    "scoring the rollouts, mean (s)",
    "`POST /complete`, mean (s)",
)
"""The rows of :func:`summary_rows` the page shows (all are printed)."""


def section(
    blocks: list[Block], args: argparse.Namespace, started: datetime, load_start: str, load_end: str
) -> str:
    rows, added, share = summary_rows(blocks)
    table = "\n".join(
        [
            "| figure | evolution off | evolution on |",
            "|---|---:|---:|",
            *(f"| {a} | {b} | {c} |" for a, b, c in rows if a in DOC_ROWS),
            f"| **added wall time per step** | | **{added * 1000:+.1f} ms ({share:+.2%})** |",
        ]
    )
    verdict = "PASS" if share <= TARGET_OVERHEAD else "FAIL"
    return doc_section(
        "loop_overhead",
        "Training-loop overhead of rubric evolution (async mode)",
        f"A simulated trainer scores {args.rollouts} rollouts a step through `amaris serve` "
        f"(LLM calls of {args.latency_ms:g} ms), then computes for {args.compute_s:g} s; "
        f"blocks of {args.steps} steps alternate with the step pipeline on "
        "(`POST /complete`, async mode) and off.",
        table,
        script=__file__,
        when=started,
        load=f"{load_start} -> {load_end}",
        targets=[
            (
                f"added wall time per step <= {TARGET_OVERHEAD:.0%}",
                f"{share:+.2%} ({added * 1000:+.1f} ms)",
                verdict,
            )
        ],
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="steps per block (default 5)")
    parser.add_argument("--repeats", type=int, default=2, help="off/on block pairs (default 2)")
    parser.add_argument("--rollouts", type=int, default=64, help="rollouts per step (default 64)")
    parser.add_argument(
        "--compute-s",
        type=float,
        default=15.0,
        help="trainer compute per step, seconds (default 15)",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=1000.0,
        help="offline LLM latency per call (default 1000)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the servers' files (logs, data) in this folder",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="markdown file to update (default docs/benchmarks.md; with --smoke, none)",
    )
    parser.add_argument("--smoke", action="store_true", help="1 step per block, 1 pair, 0 ms")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    args.out = report_path(args.out, args.smoke)
    if min(args.steps, args.repeats, args.rollouts) < 1:
        parser.error("--steps, --repeats and --rollouts must be >= 1")
    if args.compute_s < 0 or args.latency_ms < 0:
        parser.error("--compute-s and --latency-ms must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started = datetime.now(UTC)
    load_start = loadavg()
    try:
        config: dict[str, dict[str, Any]] = {
            "pipeline": {"mode": "async", "rollouts_per_step": None},
            "prefect": {"port": None, "repair_interval_seconds": None},
        }
        if args.smoke:
            config["memory"] = {"embedding_model": "hashing"}
        with (
            work_folder("amaris-loop-bench-", args.keep) as workdir,
            running_stack(args.latency_ms, workdir, config) as stack,
        ):
            blocks = asyncio.run(measure(stack.amaris_url, stack.amaris, args))
    except KeyboardInterrupt:
        print("interrupted; servers stopped, nothing written", file=sys.stderr)
        return 130
    rows, added, share = summary_rows(blocks)
    print()
    for figure, off, on in rows:
        print(f"{figure}: off {off}, on {on}")
    print(f"added wall time per step: {added * 1000:+.1f} ms ({share:+.2%})")
    text = section(blocks, args, started, load_start, loadavg())
    if args.out is None:
        print(text)
        return 0
    write_doc(args.out, text, MARK_START, MARK_END)
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
