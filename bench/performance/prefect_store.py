"""Prefect's store over a long run: the size of ``prefect.db`` and of the task result files,
with amaris's retention off and on.

For each configuration, starts ``amaris serve`` (a process it owns, bound to 127.0.0.1 on
a free port, with its Prefect server child; stopped by PID at the end, also on error or
Ctrl-C) with a temporary data folder: no LLM endpoint, so every agent is the offline judge
in process, global mode, manual step completion (``pipeline.rollouts_per_step: null``), the
hashing embedder, the scheduled repair off, its own Prefect server (the data folder's
``prefect/prefect.db``).

Then runs ``--steps`` steps through the real pipeline, one after the other: ``--rollouts``
rollouts scored by ``/batch_score``, ``POST /complete``, ``GET /rubric_status/wait``. Every
``--every`` steps it samples the database (``prefect.db`` and its WAL file; rows of flow
runs, task runs, logs, artifacts and events, read only) and the result folder
(``prefect/storage``: files and bytes).

Configurations: ``off`` (``prefect.keep_steps`` and ``prefect.retention_hours`` null),
``on`` (``--keep-steps``, ``--retention-hours``, ``--interval``: short, so that the age
bound and Prefect's event vacuum act within the run), and ``steps`` (``--keep-steps``
alone: events keep Prefect's default retention).

Results are printed, and written between the ``prefect_store`` markers of ``--out`` when
given.

Usage::

    .venv/bin/python -m bench.performance.prefect_store [--steps 500] [--every 50]
        [--rollouts 4] [--configs off,on] [--keep-steps 100] [--retention-hours 0.05]
        [--interval 30] [--out docs/benchmarks.md] [--keep DIR] [--smoke]

``--smoke``: 3 steps of 2 rollouts, sampled after each, ``on`` alone with ``--keep-steps 2``
and a 1 s interval.
"""

from __future__ import annotations

import argparse
import math
import signal
import sqlite3
import sys
import time
from contextlib import closing, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import yaml

from amaris.app.running import free_port
from bench._common import (
    Child,
    amaris_executable,
    child_env,
    doc_section,
    loadavg,
    markers,
    raise_interrupt,
    wait_ready,
    work_folder,
    write_doc,
)

MARK_START, MARK_END = markers("prefect_store")
DOC_ROWS = 6
"""Samples the page shows (all are printed)."""
TABLES = ("flow_run", "task_run", "log", "artifact", "events")
"""Tables whose rows are counted at each sample."""
REQUEST_TIMEOUT_S = 300.0
BEHAVIOURS = ("correct", "wrong", "several", "correct")
SMOKE_STEPS = 3
SMOKE = {
    "steps": SMOKE_STEPS,
    "every": 1,
    "rollouts": 2,
    "configs": "on",
    "keep_steps": 2,
    "interval": 1.0,
}


@dataclass(frozen=True)
class Sample:
    """The store after ``step`` steps."""

    step: int
    elapsed_s: float
    db_bytes: int
    rows: dict[str, int]
    files: int
    file_bytes: int


def rollout(step: int, index: int) -> dict[str, Any]:
    """Rollout ``index`` of ``step``: a distinct multiplication, answered per behaviour."""
    a, b = 11 + (step * 7 + index) % 89, 12 + index
    answer = a * b
    outputs = {
        "correct": f"{a} * {b} = {answer}. The answer is {answer}.",
        "wrong": f"I computed it quickly. The answer is {answer + 1}.",
        "several": f"The answer is {answer - 1} or {answer} or {answer + 1}.",
    }
    behaviour = BEHAVIOURS[index % len(BEHAVIOURS)]
    return {
        "id": f"s{step}-r{index}-{behaviour}",
        "input": f"What is {a} * {b}?",
        "output": outputs[behaviour],
        "supplemental_context": f"Answer: {answer}",
    }


def metadata(step: int, total: int) -> dict[str, Any]:
    return {
        "high_level_goal": "Train a careful math assistant",
        "model_size": "7B",
        "current_step": step,
        "total_steps": total,
    }


def sample(step: int, elapsed_s: float, home: Path) -> Sample:
    """The size of Prefect's database and result folder under ``home``, now."""
    db = home / "prefect.db"
    size = sum(p.stat().st_size for p in (db, home / "prefect.db-wal") if p.exists())
    rows: dict[str, int] = {}
    with suppress(sqlite3.Error), closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        con.execute("PRAGMA busy_timeout = 10000")
        for table in TABLES:
            rows[table] = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    storage = home / "storage"
    files = [p for p in storage.iterdir() if p.is_file()] if storage.is_dir() else []
    return Sample(step, elapsed_s, size, rows, len(files), sum(p.stat().st_size for p in files))


def run_steps(url: str, home: Path, args: argparse.Namespace, label: str) -> list[Sample]:
    """Run ``args.steps`` steps against amaris at ``url``, sampling every ``args.every``."""
    start = time.monotonic()
    samples = [sample(0, 0.0, home)]
    with httpx2.Client(base_url=url, timeout=REQUEST_TIMEOUT_S, trust_env=False) as http:
        for step in range(args.steps):
            items = [
                {"rollout": rollout(step, i), "metadata": metadata(step, args.steps)}
                for i in range(args.rollouts)
            ]
            scored = http.post("/batch_score", json={"items": items})
            if scored.status_code != 200:
                raise RuntimeError(f"/batch_score step {step}: {scored.status_code} {scored.text}")
            completed = http.post("/complete", json={"step": step})
            if completed.status_code != 200:
                raise RuntimeError(f"/complete step {step}: {completed.text}")
            waited = http.get("/rubric_status/wait", params={"step": step}).json()
            if waited.get("status") in ("failed", "pending"):
                raise RuntimeError(f"step {step}: {waited}")
            if (step + 1) % args.every == 0 or step + 1 == args.steps:
                samples.append(sample(step + 1, time.monotonic() - start, home))
                last = samples[-1]
                print(
                    f"  [{label}] step {last.step}: {last.elapsed_s:.0f} s, prefect.db "
                    f"{mb(last.db_bytes)} MB, {last.rows}, {last.files} result files",
                    flush=True,
                )
    return samples


def prefect_section(config: str, args: argparse.Namespace) -> dict[str, Any]:
    """The ``prefect:`` keys of configuration ``config``."""
    # A free port for amaris's Prefect server: another amaris's could answer on 4200.
    section: dict[str, Any] = {"port": None, "repair_interval_seconds": None}
    if config == "off":
        return {**section, "keep_steps": None, "retention_hours": None}
    section |= {"keep_steps": args.keep_steps, "retention_interval_seconds": args.interval}
    if config == "on":
        return {**section, "retention_hours": args.retention_hours}
    return {**section, "retention_hours": None}


def measure(config: str, args: argparse.Namespace) -> list[Sample]:
    """Run the steps against a fresh ``amaris serve`` under configuration ``config``."""
    keep = args.keep / config if args.keep else None
    with work_folder(f"amaris-prefect-store-{config}-", keep) as workdir:
        data = workdir / "data"
        port = free_port()
        settings = {
            "server": {"host": "127.0.0.1", "port": port},
            "memory": {"path": str(data), "embedding_model": "hashing"},
            "pipeline": {"rollouts_per_step": None},
            "prefect": prefect_section(config, args),
        }
        path = workdir / "config.yaml"
        path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
        argv = [amaris_executable(), "serve", "--config", str(path)]
        env = child_env(own_prefect=True)  # its Prefect store is what is measured
        amaris = Child("amaris", argv, workdir / "amaris.log", workdir, env)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(amaris, f"{url}/healthz", lambda r: r.json().get("offline_judge") is True)
            print(f"{config}: amaris pid {amaris.pid}, prefect {settings['prefect']}", flush=True)
            return run_steps(url, data / "prefect", args, config)
        finally:
            amaris.stop()


def mb(size: int) -> str:
    return f"{size / 1e6:.2f}"


def table(results: dict[str, list[Sample]], rows: int | None = None) -> str:
    """Every sample, or about ``rows`` of them evenly spaced (the first and last kept)."""
    configs = list(results)
    head = ["steps"]
    for config in configs:
        head += [f"{config}: prefect.db MB", f"{config}: runs / events", f"{config}: result files"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    samples = len(results[configs[0]])
    stride = max(1, math.ceil((samples - 1) / (rows - 1))) if rows and rows > 1 else 1
    for i, first in enumerate(results[configs[0]]):
        if i % stride and i != samples - 1:
            continue
        cells = [str(first.step)]
        for config in configs:
            s = results[config][i]
            cells += [
                mb(s.db_bytes),
                f"{s.rows.get('flow_run', 0)} / {s.rows.get('events', 0)}",
                f"{s.files} ({s.file_bytes / 1e3:.0f} kB)",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


CONFIGS = {
    "off": "`prefect.keep_steps` and `prefect.retention_hours` null",
    "on": "`keep_steps: {k}`, `retention_hours: {h:g}` ({m:g} min, so that the age bound and "
    "Prefect's event vacuum act within the run), `retention_interval_seconds: {i:g}`",
    "steps": "`keep_steps: {k}` alone, `retention_interval_seconds: {i:g}` (events keep "
    "Prefect's default 7 days)",
}


def section(
    results: dict[str, list[Sample]], args: argparse.Namespace, started: datetime, load: str
) -> str:
    configs = "; ".join(
        f"`{c}`: "
        + CONFIGS[c].format(
            k=args.keep_steps, h=args.retention_hours, m=args.retention_hours * 60, i=args.interval
        )
        for c in results
    )
    return doc_section(
        "prefect_store",
        f"Prefect's store over {args.steps} steps (retention)",
        f"`amaris serve` (offline judge, hashing embedder) runs {args.steps} steps of "
        f"{args.rollouts} rollouts one after the other through the real pipeline and its own "
        "Prefect server; `prefect.db` (with its WAL file), its flow runs and events, and the "
        f"task result files, sampled along the run. {configs}.",
        table(results, rows=DOC_ROWS),
        script=__file__,
        when=started,
        load=load,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--every", type=int, default=50, help="sample every N steps")
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per step")
    parser.add_argument("--configs", default="off,on", help="off, on and/or steps")
    parser.add_argument("--keep-steps", type=int, default=100)
    parser.add_argument("--retention-hours", type=float, default=0.05)
    parser.add_argument("--interval", type=float, default=30.0, help="retention interval, s")
    parser.add_argument("--out", type=Path, help="markdown file to update")
    parser.add_argument("--keep", type=Path, help="keep the data folders under this folder")
    parser.add_argument("--smoke", action="store_true", help="3 steps of 2 rollouts, on alone")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = set(args.configs) - {"off", "on", "steps"}
    if unknown:
        parser.error(f"unknown configurations: {sorted(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started = datetime.now(UTC)
    load = loadavg(all_three=True)
    results: dict[str, list[Sample]] = {}
    try:
        for config in args.configs:
            results[config] = measure(config, args)
    except KeyboardInterrupt:
        print("interrupted; servers stopped, nothing written", file=sys.stderr)
        return 130
    print()
    print(table(results))
    if args.out is not None:
        write_doc(args.out, section(results, args, started, load), MARK_START, MARK_END)
        print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
