"""The first step's memory tasks: does the first step pay for loading the embedder?

Starts ``amaris offline-llm --latency-ms L`` and ``amaris serve`` (the default MiniLM
embedder, manual step completion), both bound to 127.0.0.1 on free ports and stopped by
PID at the end. As soon as ``/healthz`` answers, it scores ``--rollouts`` rollouts of step 0
(as a trainer would right after the server is up), then ``POST /complete {"step": 0}`` and
``GET /rubric_status/wait?step=0``. From Prefect's task runs of ``step-0`` (its SQLite
database under the data folder) it reports the time of each memory task (``remember``:
embeds the step's summaries; ``retrieve-memory``: embeds the queries and searches) and
the step's wall time. Repeated ``--runs`` times, each with a fresh data folder and process
(a cold start each time).

The model is read from disk each run; the OS's file cache stays warm after the first
run, as on a server that restarts. Target: the first step's retrieve-memory < 1 s (the
embedder loads in the background from the service's start).

Results are printed and written between the ``first_step_memory <label>`` markers of
``docs/benchmarks.md`` (one section per ``--label``).

Usage::

    .venv/bin/python -m bench.performance.first_step_memory [--runs 3] [--rollouts 16]
        [--latency-ms 200] [--label after] [--out docs/benchmarks.md] [--smoke]
    PYTHONPATH=/path/to/old/tree:. .venv/bin/python -P -m bench.performance.first_step_memory
        --label before

To measure other code (e.g. the code before a change), put its tree first on
``PYTHONPATH``: the ``amaris serve`` child inherits the environment. ``--smoke``: one run of
2 rollouts, LLM calls of 0 ms, the hashing embedder (no model to load: no figure).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2

from bench._common import (
    command_line,
    doc_section,
    loadavg,
    markers,
    raise_interrupt,
    report_path,
    running_stack,
    shared_prefect_database,
    work_folder,
    write_doc,
)
from bench.performance.step_pipeline import (
    TaskRun,
    prefect_runs,
    run_step,
    score_many,
    step_rollout,
)

STEP = 0
TASKS = ("remember", "retrieve-memory")
TARGET_RETRIEVE_S = 1.0
"""The first step's ``retrieve-memory`` takes less than this (median of the runs)."""
DEFAULT_LABEL = "after"
SMOKE = {"runs": 1, "rollouts": 2, "latency_ms": 0.0}
REQUEST_TIMEOUT_S = 300.0
RECORDED_S = 30.0
"""How long the memory tasks' runs may take to reach Prefect's database after the step."""


async def one_run(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    """One cold start: seconds of each memory task of step 0, the step, and the start."""
    config: dict[str, dict[str, Any]] = {
        "pipeline": {"rollouts_per_step": None},
        "prefect": {"port": None},
    }
    if args.smoke:
        config["memory"] = {"embedding_model": "hashing"}
    t_start = time.perf_counter()
    # Its own Prefect server: the step's task runs are read from its database (or the
    # smoke tests' shared server, whose database they give).
    own = shared_prefect_database() is None
    with running_stack(args.latency_ms, workdir, config, own_prefect=own) as stack:
        up_s = time.perf_counter() - t_start
        async with httpx2.AsyncClient(
            timeout=httpx2.Timeout(REQUEST_TIMEOUT_S), trust_env=False
        ) as client:
            rollouts = [step_rollout(STEP, i) for i in range(args.rollouts)]
            await score_many(client, stack.amaris_url, STEP, rollouts, 8)
            _, step_s, _ = await run_step(client, stack.amaris_url, STEP)
        flow, tasks = await asyncio.to_thread(memory_runs, stack.data_dir)
    result = {"start (until /healthz)": up_s, "step 0 wall time": step_s}
    if flow is not None:
        result["step-0 flow run"] = flow.end - flow.start
    for name in TASKS:
        spans = [t.end - t.start for t in tasks if t.name.startswith(name)]
        if spans:
            result[name] = max(spans)
    return result


def memory_runs(data_dir: Path) -> tuple[TaskRun | None, list[TaskRun]]:
    """Step 0's flow run and task runs, read again until every one of :data:`TASKS` is
    there (Prefect records task runs from their events, which may come after the flow run's
    end), for :data:`RECORDED_S` at most."""
    deadline = time.monotonic() + RECORDED_S
    while True:
        flow, tasks = prefect_runs(data_dir, STEP)
        recorded = all(any(t.name.startswith(name) for t in tasks) for name in TASKS)
        if recorded or time.monotonic() > deadline:
            return flow, tasks
        time.sleep(0.5)


def section(
    runs: list[dict[str, float]], args: argparse.Namespace, started: datetime, load: str
) -> str:
    names = list(runs[0])
    header = "| | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | median |"
    rule = "|---|" + "---:|" * (len(runs) + 1)
    rows = []
    for name in names:
        values = [r.get(name, float("nan")) for r in runs]
        cells = " | ".join(f"{v:.2f} s" for v in values)
        rows.append(f"| {name} | {cells} | {statistics.median(values):.2f} s |")
    retrieve = statistics.median(r.get("retrieve-memory", float("nan")) for r in runs)
    path = os.environ.get("PYTHONPATH")
    return doc_section(
        f"first_step_memory {args.label}",
        "First step's memory tasks: the embedder's load"
        + ("" if args.label == DEFAULT_LABEL else f" ({args.label})"),
        f"`amaris serve` started cold ({args.runs} runs, "
        f"{'the hashing' if args.smoke else 'the default MiniLM'} embedder, LLM "
        f"calls of {args.latency_ms:g} ms); {args.rollouts} rollouts of step 0 scored as soon "
        "as `/healthz` answers, then `/complete`: the durations of the step's memory tasks "
        "(Prefect's task runs).",
        "\n".join([header, rule, *rows]),
        script=__file__,
        when=started,
        load=load,
        command=f"PYTHONPATH={path} {command_line()}" if path else None,
        targets=[
            (
                f"the first step's retrieve-memory < {TARGET_RETRIEVE_S:g} s (median)",
                f"{retrieve:.2f} s",
                "PASS" if retrieve < TARGET_RETRIEVE_S else "FAIL",
            )
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="cold starts (default 3)")
    parser.add_argument("--rollouts", type=int, default=16, help="rollouts of step 0 (16)")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="LLM ms per call (200)")
    parser.add_argument(
        "--label",
        default=DEFAULT_LABEL,
        help=f"names the report's section (default {DEFAULT_LABEL}): a run under another "
        "label keeps a section of its own",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="markdown file to update (default docs/benchmarks.md; with --smoke, none)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="1 run of 2 rollouts, 0 ms, hashing embedder"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    out = report_path(args.out, args.smoke)
    if args.runs < 1 or args.rollouts < 1 or args.latency_ms < 0:
        parser.error("--runs and --rollouts must be >= 1, --latency-ms >= 0")
    signal.signal(signal.SIGTERM, raise_interrupt)
    started, load = datetime.now(UTC), loadavg(all_three=True)
    runs = []
    try:
        for i in range(args.runs):
            with work_folder("amaris-first-step-", None) as workdir:
                result = asyncio.run(one_run(args, workdir))
            runs.append(result)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in result.items()))
    except KeyboardInterrupt:
        print("interrupted; servers stopped, nothing written", file=sys.stderr)
        return 130
    text = section(runs, args, started, load)
    print(text)
    if out is not None:
        write_doc(out, text, *markers(f"first_step_memory {args.label}"))
        print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
