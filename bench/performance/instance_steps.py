"""One step over many distinct prompts: ``per_instance`` rubrics against a global rubric.

For each mode of ``--modes`` (``memory.rubrics_mode``) starts ``amaris offline-llm`` (the
rule-based judge, ``--latency-ms`` per call) and ``amaris serve`` judging through it (their
own temporary data folder, on free ports of 127.0.0.1, stopped by PID at the end), then:

1. logs ``--prompts`` distinct prompts, one rollout each, for step 1 (``/batch_score``);
2. ``POST /complete`` and ``GET /rubric_status/wait`` (repeated until it is final): the
   step's wall time;
3. reads what the step left: its Prefect task runs (``<data>/prefect/*.db``), the growth
   of Prefect's database and of its result files, and amaris's peak RSS (``VmHWM``).

``--sigterm S`` instead sends SIGTERM ``S`` seconds after ``/complete`` and measures the
time until the service has exited.

Usage::

    .venv/bin/python -m bench.performance.instance_steps [--prompts 3000]
        [--modes per_instance,global] [--latency-ms 0] [--sigterm S] [--keep DIR]
        [--embedder hashing] [--py-spy FILE] [--smoke]

Prints its figures; ``docs/benchmarks.md`` quotes them with this command. ``--smoke``: 4
prompts, ``per_instance`` alone, the hashing embedder.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from bench._common import (
    loadavg,
    machine,
    prefect_database,
    raise_interrupt,
    running_stack,
    shared_prefect_database,
    start_profiler,
    stop_profiler,
    work_folder,
)

STEP = 1
BATCH = 500
WAIT_S = 60.0
EXIT_DEADLINE_S = 120.0
SMOKE = {"prompts": 4, "modes": "per_instance", "embedder": "hashing"}


def rollout(n: int) -> dict[str, Any]:
    """Prompt ``n``: a distinct multiplication, answered correctly or off by one."""
    a, b = 11 + n % 97, 13 + n // 97
    answer = a * b + (n % 3 == 0)
    return {
        "id": f"p{n}",
        "input": f"What is {a} * {b}?",
        "output": f"{a} * {b} = {answer}. The answer is {answer}.",
        "supplemental_context": f"Answer: {a * b}",
    }


def log_rollouts(client: httpx2.Client, url: str, prompts: int) -> float:
    """Score ``prompts`` rollouts of :data:`STEP` in batches; seconds it took."""
    t0 = time.perf_counter()
    meta = {"current_step": STEP, "high_level_goal": "Train a careful math assistant"}
    for start in range(0, prompts, BATCH):
        items = [
            {"rollout": rollout(n), "metadata": meta}
            for n in range(start, min(prompts, start + BATCH))
        ]
        response = client.post(f"{url}/batch_score", json={"items": items})
        response.raise_for_status()
    return time.perf_counter() - t0


def wait_step(client: httpx2.Client, url: str) -> dict[str, Any]:
    """``/rubric_status/wait`` until the step's answer is final."""
    while True:
        response = client.get(f"{url}/rubric_status/wait", params={"step": STEP, "timeout": WAIT_S})
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        if answer.get("status") != "pending":
            return answer


@dataclass
class Footprint:
    db_bytes: int
    result_files: int
    result_bytes: int


def footprint(data: Path) -> Footprint:
    """Prefect's database (with its journal files) and the result files under ``data``."""
    database = prefect_database(data)
    db = 0 if database is None else sum(p.stat().st_size for p in database.parent.glob("*.db*"))
    files = [p for p in (data / "prefect" / "storage").rglob("*") if p.is_file()]
    return Footprint(db, len(files), sum(p.stat().st_size for p in files))


def task_runs(data: Path) -> int:
    """The task runs of flow run ``step-<STEP>`` Prefect recorded."""
    database = prefect_database(data)
    if database is None:
        return -1
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5.0) as db:
        row = db.execute(
            "SELECT COUNT(*) FROM task_run WHERE flow_run_id = (SELECT id FROM flow_run "
            "WHERE name = ? ORDER BY created DESC LIMIT 1)",
            (f"step-{STEP}",),
        ).fetchone()
    return int(row[0])


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_mode(mode: str, args: argparse.Namespace, workdir: Path) -> None:
    sections = {
        "memory": {"rubrics_mode": mode, "embedding_model": args.embedder},
        "pipeline": {"rollouts_per_step": None},
        "server": {"max_batch_items": BATCH},
    }
    # Its own Prefect server: the step's task runs and store are read from its files (or
    # the smoke tests' shared server's, whose database they give).
    own = shared_prefect_database() is None
    with running_stack(args.latency_ms, workdir, sections, own_prefect=own) as stack:
        url = stack.amaris_url
        with httpx2.Client(timeout=WAIT_S + 30, trust_env=False) as client:
            logged = log_rollouts(client, url, args.prompts)
            before = footprint(stack.data_dir)
            profiler = start_profiler(stack.amaris.pid, args.py_spy)
            t0 = time.perf_counter()
            response = client.post(f"{url}/complete", json={"step": STEP})
            response.raise_for_status()
            if args.sigterm is not None:
                time.sleep(args.sigterm)
                t1 = time.perf_counter()
                stack.amaris.popen.send_signal(signal.SIGTERM)
                code = stack.amaris.popen.wait(timeout=EXIT_DEADLINE_S)
                print(
                    f"{mode}: {args.prompts} prompts, SIGTERM {args.sigterm:g} s into the "
                    f"step: exited in {time.perf_counter() - t1:.2f} s (code {code})",
                    flush=True,
                )
                return
            answer = wait_step(client, url)
            wall = time.perf_counter() - t0
            stop_profiler(profiler)
            peak = peak_rss_mb(stack.amaris.pid)
        after = footprint(stack.data_dir)
        runs = task_runs(stack.data_dir)
        outcomes: dict[str, int] = {}
        for scope in (answer.get("scopes") or {}).values():
            kind = str(scope.get("outcome"))
            outcomes[kind] = outcomes.get(kind, 0) + 1
        print(
            f"{mode}: {args.prompts} prompts logged in {logged:.1f} s; step {answer.get('status')} "
            f"in {wall:.1f} s; {runs} task runs; prefect.db +"
            f"{(after.db_bytes - before.db_bytes) / 1e6:.1f} MB; result files +"
            f"{after.result_files - before.result_files} "
            f"(+{(after.result_bytes - before.result_bytes) / 1e6:.1f} MB); peak RSS "
            f"{peak:.0f} MB; scopes {dict(sorted(outcomes.items()))}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=3000)
    parser.add_argument("--modes", default="per_instance,global")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--sigterm", type=float, default=None)
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument("--embedder", default=None, help="memory.embedding_model (default: MiniLM)")
    parser.add_argument("--py-spy", type=Path, default=None, help="record the step with py-spy")
    parser.add_argument("--smoke", action="store_true", help="4 prompts, per_instance, hashing")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    signal.signal(signal.SIGTERM, raise_interrupt)
    print(machine(), loadavg(), flush=True)
    for mode in args.modes.split(","):
        with work_folder(f"amaris-instances-{mode}-", args.keep and args.keep / mode) as folder:
            run_mode(mode, args, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
