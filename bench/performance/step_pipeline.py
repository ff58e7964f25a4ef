"""Wall time of one training step's pipeline against its LLM critical path, and ``/score``
latency while the step's flow runs.

Starts two processes it owns, both bound to 127.0.0.1 on free ports, and stops them by
PID at the end (also on error or Ctrl-C):

* ``amaris offline-llm --latency-ms L``: the rule-based judge behind an OpenAI-compatible
  API, sleeping ``L`` ms per request (a stand-in for a real LLM);
* ``amaris serve`` with a temporary configuration: every agent on that LLM, the default
  MiniLM embedder, ``concurrency.analyzer: C``, manual step completion
  (``pipeline.rollouts_per_step: null``), ``pipeline.chunk_size: 32``.

Then, in one run:

1. warm-up: step 0 with 4 rollouts, ``/complete``, ``/rubric_status/wait`` (the server
   boots its Prefect server in the background and loads MiniLM on first use: neither
   belongs in the measured step);
2. ``--rollouts`` distinct math rollouts for step 1 (correct, wrong, several candidate
   answers), scored by concurrent ``/score`` calls;
3. idle ``/score`` latency: ``--probe-requests`` unique rollouts of a future step at
   ``--probe-concurrency`` in flight;
4. the step: ``POST /complete {"step": 1}`` then ``GET /rubric_status/wait?step=1``; its
   wall time, while the same ``/score`` load runs on another future step;
5. the LLM critical-path lower bound of the step, from the calls it made
   (``<data>/logs/llm_calls.jsonl``, checked against the counts the configuration
   implies) and their median latency: ``ceil(analyzer calls / analyzer concurrency)``
   waves, one wave of chunk summaries, one meta-summary, one query generation, one
   update, each of one call latency;
6. where the time went, from Prefect's task runs of the step (its SQLite database under
   ``<data>/prefect``): each stage's span, the analyzer waves, the gaps between stages.

Results are printed and written between the ``step_pipeline`` markers of
``docs/benchmarks.md``. Targets: step wall time <= lower bound + 3%; ``/score`` p99
during the step <= 2 x idle p99.

Usage::

    .venv/bin/python -m bench.performance.step_pipeline [--rollouts 256] [--latency-ms 1000]
        [--analyzer-concurrency 32] [--out docs/benchmarks.md]
        [--probe-requests 200] [--probe-concurrency 4] [--keep DIR] [--py-spy FILE]

``--keep DIR`` keeps the servers' logs and data folder (call log, Prefect database);
``--py-spy FILE`` records amaris and its children with py-spy during the step (a
``.json`` file gets a Chrome trace with timestamps; ``pip install py-spy`` first).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2

from amaris.app.running import proc_stat, session_pids
from bench._common import (
    CLK_TCK,
    ROOT,
    Stack,
    doc_section,
    loadavg,
    markers,
    percentile,
    prefect_database,
    py_spy,
    raise_interrupt,
    running_stack,
    settle,
    start_profiler,
    stop_profiler,
    work_folder,
    write_doc,
)

MARK_START, MARK_END = markers("step_pipeline")
CHUNK_SIZE = 32
TARGET_OVERHEAD = 0.03
"""Step wall time at most this share above the LLM critical-path lower bound."""
TARGET_P99_RATIO = 2.0
"""``/score`` p99 during the step's flow at most this multiple of the idle p99."""
WARMUP_STEP = 0
MEASURED_STEP = 1
IDLE_PROBE_STEP = 1000
BUSY_PROBE_STEP = 1001
REQUEST_TIMEOUT_S = 300.0
PREFECT_SETTLE_S = 20.0
"""How long to wait for Prefect's server to record the step's task runs."""
STAGES = (
    "load-rollouts",
    "audit",
    "analyze",
    "summarize",
    "meta-summarize",
    "remember",
    "generate-queries",
    "retrieve-memory",
    "update-rubric",
    "publish-rubric",
)
"""Task-run name prefixes of the step flow, in order (see flows/step_pipeline.py)."""
LLM_AGENTS = ("analyzer", "summarizer", "meta_summarizer", "query_generator", "updater")
"""The step path's LLM agents, in the order they run."""
ALONE_AGENTS = ("meta_summarizer", "query_generator", "updater")
"""Agents making one call, alone in flight: their latency is the LLM's, unloaded."""

# -- rollouts ------------------------------------------------------------------------
LEAD_INS = (
    "Let me work it out.",
    "Here is my reasoning.",
    "Working step by step.",
    "Quick check first.",
    "Thinking about it carefully.",
    "Let us see.",
    "Computing the product.",
    "Straightforward multiplication.",
)
BEHAVIOURS = ("correct", "correct", "wrong", "several", "correct", "several", "wrong", "correct")
"""Behaviour of the k-th rollout of a group (8 rollouts per prompt, as a GRPO group)."""
GROUP_SIZE = len(BEHAVIOURS)


def problem(n: int) -> tuple[str, int]:
    """Problem ``n``: a distinct multiplication for every n below 89 * 88."""
    a, b = 11 + n % 89, 12 + n // 89
    return f"What is {a} * {b}?", a * b


def metadata(step: int) -> dict[str, Any]:
    return {
        "high_level_goal": "Train a careful math assistant",
        "model_size": "7B",
        "current_step": step,
        "total_steps": 10,
    }


def step_rollout(step: int, index: int) -> dict[str, Any]:
    """Rollout ``index`` of ``step``: distinct text; groups of 8 share a prompt."""
    question, answer = problem(step * 1000 + index // GROUP_SIZE)
    k = index % GROUP_SIZE
    lead = LEAD_INS[k]
    behaviour = BEHAVIOURS[k]
    expression = question[8:-1]
    outputs = {
        "correct": f"{lead} {expression} = {answer}. The answer is {answer}.",
        "wrong": f"{lead} I computed it quickly. The answer is {answer + 1}.",
        "several": f"{lead} The answer is {answer - 1} or {answer} or {answer + 1}.",
    }
    return {
        "id": f"s{step}-r{index}-{behaviour}",
        "input": question,
        "output": outputs[behaviour],
        "supplemental_context": f"Answer: {answer}",
    }


def probe_rollout(step: int, n: int) -> dict[str, Any]:
    """A unique correct rollout for the latency probes (no score-cache hit)."""
    question, answer = problem(n)
    expression = question[8:-1]
    return {
        "id": f"probe-{step}-{n}",
        "input": question,
        "output": f"{expression} = {answer}. The answer is {answer}.",
        "supplemental_context": f"Answer: {answer}",
    }


# -- processes ---------------------------------------------------------------------
def thread_cpu(sid: int) -> dict[tuple[int, int], float]:
    """CPU seconds per (pid, tid) of every thread of session ``sid``."""
    out: dict[tuple[int, int], float] = {}
    for pid in session_pids(sid):
        with suppress(OSError):
            for entry in Path(f"/proc/{pid}/task").iterdir():
                fields = proc_stat(pid, int(entry.name)) if entry.name.isdigit() else None
                if fields is not None:
                    out[(pid, int(entry.name))] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def thread_names(pid: int) -> dict[int, str]:
    """Python thread names by OS thread id, from ``py-spy dump`` (empty without py-spy)."""
    exe = py_spy()
    if exe is None:
        return {}
    try:
        dump = subprocess.run(
            [exe, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    names: dict[int, str] = {}
    for line in dump.splitlines():
        match = re.match(r'Thread (\d+) \(\w+\): "(.*)"', line)
        if match:
            names[int(match.group(1))] = match.group(2)
    return names


# -- HTTP ------------------------------------------------------------------------------
async def score(
    client: httpx2.AsyncClient, url: str, step: int, rollout: dict[str, Any]
) -> str | None:
    """POST /score; None when scored, else a description of the failure."""
    body = {"rollout": rollout, "metadata": metadata(step)}
    try:
        response = await client.post(f"{url}/score", json=body)
    except httpx2.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    status = response.json().get("status")
    return None if status == "scored" else f"status {status}: {response.text[:200]}"


async def score_many(
    client: httpx2.AsyncClient,
    url: str,
    step: int,
    rollouts: list[dict[str, Any]],
    concurrency: int,
) -> None:
    """Score ``rollouts`` with ``concurrency`` requests in flight; fail on any error."""
    gate = asyncio.Semaphore(concurrency)

    async def one(rollout: dict[str, Any]) -> str | None:
        async with gate:
            return await score(client, url, step, rollout)

    errors = [e for e in await asyncio.gather(*(one(r) for r in rollouts)) if e]
    if errors:
        raise RuntimeError(f"{len(errors)} /score errors for step {step}; first: {errors[0]}")


async def run_step(
    client: httpx2.AsyncClient, url: str, step: int
) -> tuple[float, float, dict[str, Any]]:
    """``/complete`` then ``/rubric_status/wait``: (wall-clock start, seconds, wait answer)."""
    started_at = time.time()
    t0 = time.perf_counter()
    response = await client.post(f"{url}/complete", json={"step": step})
    if response.status_code != 200 or response.json().get("status") != "complete":
        raise RuntimeError(f"/complete step {step}: HTTP {response.status_code} {response.text}")
    waited = await client.get(f"{url}/rubric_status/wait", params={"step": step})
    elapsed = time.perf_counter() - t0
    answer: dict[str, Any] = waited.json()
    if waited.status_code != 200 or answer.get("status") in ("failed", "pending"):
        raise RuntimeError(
            f"step {step} did not finish: HTTP {waited.status_code} {waited.text[:500]}"
        )
    return started_at, elapsed, answer


@dataclass
class Probe:
    """``/score`` latencies of one probe load."""

    name: str
    latencies_ms: list[float] = field(default_factory=list)
    started: list[float] = field(default_factory=list)
    """Wall-clock start of each request of ``latencies_ms``."""
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    def pct(self, q: float) -> float:
        return percentile(self.latencies_ms, q)

    def slowest(self, since: float, n: int = 3) -> str:
        """The ``n`` slowest requests: latency, and start in seconds after ``since``."""
        pairs = sorted(zip(self.latencies_ms, self.started, strict=True), reverse=True)[:n]
        return ", ".join(f"{ms:.0f} ms at {start - since:+.1f} s" for ms, start in pairs)


async def probe_load(
    client: httpx2.AsyncClient,
    url: str,
    probe: Probe,
    step: int,
    numbers: Iterator[int],
    concurrency: int,
    count: int | None = None,
    stop: asyncio.Event | None = None,
) -> Probe:
    """``concurrency`` workers sending unique rollouts back to back, until ``count``
    requests were sent or ``stop`` is set (requests in flight then still count)."""
    sent = itertools.count()
    t_start = time.perf_counter()

    async def worker() -> None:
        while True:
            if stop is not None and stop.is_set():
                return
            if count is not None and next(sent) >= count:
                return
            started = time.time()
            t0 = time.perf_counter()
            error = await score(client, url, step, probe_rollout(step, next(numbers)))
            if error is None:
                probe.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
                probe.started.append(started)
            else:
                probe.errors.append(error)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    probe.duration_s = time.perf_counter() - t_start
    return probe


# -- analysis: the LLM call log ----------------------------------------------------------
@dataclass
class CallStats:
    """The measured step's LLM calls (``llm_calls.jsonl``)."""

    counts: dict[str, int]
    expected: dict[str, int]
    not_ok: int
    reasks: int
    median_latency_ms: float
    latency_by_agent: dict[str, float]
    first_time: dict[str, float]
    waves: dict[str, int]

    @property
    def total_waves(self) -> int:
        return sum(self.waves.values())

    @property
    def alone_latency_ms(self) -> float:
        """Median latency of the step's calls made with no other call in flight."""
        alone = [self.latency_by_agent[a] for a in ALONE_AGENTS if a in self.latency_by_agent]
        return statistics.median(alone) if alone else float("nan")

    @property
    def match(self) -> bool:
        return self.counts == self.expected and self.not_ok == 0 and self.reasks == 0


def read_calls(data_dir: Path, step: int) -> list[dict[str, Any]]:
    path = data_dir / "logs" / "llm_calls.jsonl"
    calls = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("step") == step and record.get("agent") in LLM_AGENTS:
                calls.append(record)
    return calls


def judge_calls(data_dir: Path, step: int) -> dict[str, int]:
    """The step pipeline's calls that grade a reply, per agent: the audit judge's
    (``auditor``) and the judge canaries' (``judge_canary``)."""
    path = data_dir / "logs" / "llm_calls.jsonl"
    counts: Counter[str] = Counter()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("step") == step and record.get("agent") in ("auditor", "judge_canary"):
                counts[str(record["agent"])] += 1
    return dict(counts)


def limit_of(config: dict[str, Any], agent: str) -> int | None:
    limits = config.get("concurrency") or {}
    values = [v for v in (limits.get(agent), limits.get("total")) if v]
    return min(values) if values else None


def call_stats(calls: list[dict[str, Any]], rollouts: int, config: dict[str, Any]) -> CallStats:
    """Counts per agent, those the configuration implies, and the critical path in waves."""
    counts = Counter(str(c["agent"]) for c in calls)
    chunks = math.ceil(rollouts / CHUNK_SIZE)
    expected = {
        "analyzer": rollouts,
        "summarizer": chunks,
        "meta_summarizer": 1 if chunks > 1 else 0,
        "query_generator": 1,
        "updater": 1,
    }
    ok = [c for c in calls if c.get("outcome") == "ok"]
    latency = statistics.median(float(c["latency_ms"]) for c in ok) if ok else float("nan")
    waves: dict[str, int] = {}
    for agent in LLM_AGENTS:
        n = counts.get(agent, 0)
        limit = limit_of(config, agent)
        waves[agent] = math.ceil(n / limit) if limit else (1 if n else 0)
    by_agent = {
        a: statistics.median(float(c["latency_ms"]) for c in ok if c["agent"] == a)
        for a in LLM_AGENTS
        if any(c["agent"] == a for c in ok)
    }
    first = {
        a: min(float(c["time"]) for c in calls if c["agent"] == a)
        for a in LLM_AGENTS
        if counts.get(a)
    }
    return CallStats(
        counts={a: counts.get(a, 0) for a in LLM_AGENTS},
        expected=expected,
        not_ok=len(calls) - len(ok),
        reasks=sum(1 for c in calls if c.get("reask")),
        median_latency_ms=latency,
        latency_by_agent=by_agent,
        first_time=first,
        waves=waves,
    )


# -- analysis: Prefect's task runs ---------------------------------------------------------
@dataclass
class TaskRun:
    name: str
    start: float
    end: float


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    text = str(value).replace(" ", "T")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def prefect_runs(data_dir: Path, step: int) -> tuple[TaskRun | None, list[TaskRun]]:
    """The flow run ``step-<step>`` and its task runs, from Prefect's SQLite database
    (read-only, :func:`prefect_database`); waits up to PREFECT_SETTLE_S for the server to
    record them all."""
    database = prefect_database(data_dir)
    if database is None:
        return None, []
    uri = f"file:{database}?mode=ro"
    deadline = time.monotonic() + PREFECT_SETTLE_S
    flow: TaskRun | None = None
    tasks: list[TaskRun] = []
    while True:
        try:
            with sqlite3.connect(uri, uri=True, timeout=5.0) as db:
                row = db.execute(
                    "SELECT id, start_time, end_time FROM flow_run WHERE name = ? "
                    "ORDER BY created DESC LIMIT 1",
                    (f"step-{step}",),
                ).fetchone()
                rows = (
                    []
                    if row is None
                    else db.execute(
                        "SELECT name, start_time, end_time FROM task_run WHERE flow_run_id = ?",
                        (row[0],),
                    ).fetchall()
                )
        except sqlite3.Error as exc:
            print(f"  cannot read Prefect's database {database}: {exc}", file=sys.stderr)
            return None, []
        if row is not None:
            start, end = _epoch(row[1]), _epoch(row[2])
            flow = TaskRun(f"step-{step}", start, end) if start and end else None
            tasks = []
            for name, t_start, t_end in rows:
                s, e = _epoch(t_start), _epoch(t_end)
                if s is not None and e is not None:
                    tasks.append(TaskRun(str(name), s, e))
            complete = flow is not None and len(tasks) == len(rows) and rows
            if complete or time.monotonic() > deadline:
                return flow, tasks
        elif time.monotonic() > deadline:
            return None, []
        time.sleep(0.5)


def stage_of(name: str) -> str:
    for stage in sorted(STAGES, key=len, reverse=True):
        if name.startswith(stage + "-"):
            return stage
    return name


STAGE_AGENT = {
    "analyze": "analyzer",
    "summarize": "summarizer",
    "meta-summarize": "meta_summarizer",
    "generate-queries": "query_generator",
    "update-rubric": "updater",
}
"""The stages that are LLM waves, and their agent."""


@dataclass
class Timeline:
    """Where the step's wall time went (seconds, from ``POST /complete``)."""

    rows: list[tuple[str, str]]
    """(what, figure) lines."""
    breakdown: list[tuple[str, float]]
    """Wall time minus the lower bound, split by cause (sums to the overhead)."""
    spans: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    """Each stage's first start and last end (seconds from ``POST /complete``), task runs."""
    stage_cost: dict[str, float] = field(default_factory=dict)
    """Each stage's share of :attr:`breakdown`."""


def critical_path(
    spans: dict[str, tuple[float, float, int]], start: float, end: float
) -> dict[str, float]:
    """Seconds of [start, end] owned by each stage: an LLM stage owns the time it runs, a
    stage without LLM calls only the time no LLM stage runs (side by side, it costs
    nothing); "" owns the time no stage runs. Stages running together share it."""
    points = sorted({start, end, *(t for s, e, _ in spans.values() for t in (s, e))})
    owned: dict[str, float] = {}
    for a, b in itertools.pairwise(points):
        if b <= start or a >= end:
            continue
        middle = (a + b) / 2
        active = [stage for stage, (s, e, _) in spans.items() if s <= middle < e]
        llm = [stage for stage in active if stage in STAGE_AGENT]
        owners = llm or active or [""]
        for owner in owners:
            owned[owner] = owned.get(owner, 0.0) + (b - a) / len(owners)
    return owned


def timeline(
    started_at: float,
    wall_s: float,
    flow: TaskRun | None,
    tasks: list[TaskRun],
    calls: CallStats,
    analyzer_limit: int | None,
) -> Timeline | None:
    if flow is None or not tasks:
        return None
    latency_s = calls.median_latency_ms / 1000.0

    def rel(t: float) -> float:
        return t - started_at

    spans: dict[str, tuple[float, float, int]] = {}
    for stage in STAGES:
        runs = [t for t in tasks if stage_of(t.name) == stage]
        if runs:
            spans[stage] = (
                rel(min(t.start for t in runs)),
                rel(max(t.end for t in runs)),
                len(runs),
            )
    rows: list[tuple[str, str]] = [
        ("POST /complete -> flow run start", f"{rel(flow.start):.2f} s"),
    ]
    previous_end = rel(flow.start)
    previous = "flow start"
    for stage, (s, e, n) in sorted(spans.items(), key=lambda item: item[1][0]):
        gap = s - previous_end
        rows.append(
            (
                f"gap {previous} -> {stage} start"
                if gap >= 0
                else f"{stage} starts before {previous} (side by side)",
                f"{gap:.2f} s",
            )
        )
        rows.append(
            (
                f"{stage} ({n} task run{'s' if n > 1 else ''})",
                f"{s:.2f} -> {e:.2f} s ({e - s:.2f} s)",
            )
        )
        if e >= previous_end:
            previous_end, previous = e, f"{stage} end"
    rows.append((f"gap {previous} -> flow run end", f"{rel(flow.end) - previous_end:.2f} s"))
    if wall_s < rel(flow.end):
        rows.append(
            (
                "/rubric_status/wait answered -> flow run end (the run's record, after the answer)",
                f"{rel(flow.end) - wall_s:.2f} s",
            )
        )
    else:
        rows.append(
            ("flow run end -> /rubric_status/wait answered", f"{wall_s - rel(flow.end):.2f} s")
        )
    # What follows the answer is not in the step's wall time.
    end = min(rel(flow.end), wall_s)
    ends = sorted(rel(t.end) for t in tasks if stage_of(t.name) == "analyze")
    if ends and analyzer_limit:
        wave_ends = [
            ends[min(i + analyzer_limit, len(ends)) - 1]
            for i in range(0, len(ends), analyzer_limit)
        ]
        starts = sorted(rel(t.start) for t in tasks if stage_of(t.name) == "analyze")
        rows.append(
            ("analyze task runs started (first -> last)", f"{starts[0]:.2f} -> {starts[-1]:.2f} s")
        )
        steps = [b - a for a, b in itertools.pairwise([starts[0], *wave_ends])]
        rows.append(
            (
                f"analyzer wave ends (every {analyzer_limit}th task run end)",
                ", ".join(f"{w:.2f}" for w in wave_ends) + " s",
            )
        )
        rows.append(
            (
                f"analyzer wave durations (ideal = 1 call latency {latency_s:.2f} s)",
                ", ".join(f"{d:.2f}" for d in steps) + " s",
            )
        )
    owned = critical_path(spans, rel(flow.start), end)
    breakdown: list[tuple[str, float]] = [
        (
            "POST /complete -> flow run start (and flow run end -> wait answered, if first)",
            rel(flow.start) + wall_s - end,
        ),
        (
            "gaps between the flow's stages (no task run running: Prefect task-run set-up, "
            "parameter handling)",
            owned.pop("", 0.0),
        ),
    ]
    stage_cost: dict[str, float] = {}
    for stage in spans:
        agent = STAGE_AGENT.get(stage)
        if agent is not None:
            waves = calls.waves.get(agent, 0)
            stage_cost[stage] = owned.get(stage, 0.0) - waves * latency_s
            what = f"{stage}: time on the critical path - {waves} x call latency"
        else:
            stage_cost[stage] = owned.get(stage, 0.0)
            what = f"{stage} (no LLM call), while no LLM stage runs"
        breakdown.append((what, stage_cost[stage]))
    return Timeline(rows, breakdown, spans, stage_cost)


# -- analysis: CPU during the step ---------------------------------------------------------
@dataclass
class CpuUse:
    """CPU seconds used during the step by each process, and by amaris's busiest threads."""

    wall_s: float
    processes: list[tuple[str, float]]
    threads: list[tuple[str, float]]

    def rows(self) -> list[tuple[str, str]]:
        out = [
            (f"CPU {name}", f"{cpu:.2f} s ({cpu / self.wall_s:.0%} of a core)")
            for name, cpu in self.processes
        ]
        total = sum(cpu for _, cpu in self.processes)
        cores = os.cpu_count() or 1
        out.append(
            (
                "CPU all of the above",
                f"{total:.2f} s ({total / self.wall_s / cores:.0%} of {cores} cores)",
            )
        )
        out += [
            (f"CPU amaris thread {name}", f"{cpu:.2f} s ({cpu / self.wall_s:.0%} of a core)")
            for name, cpu in self.threads
        ]
        return out


def cpu_use(
    stack: Stack,
    wall_s: float,
    before: dict[str, dict[tuple[int, int], float]],
    after: dict[str, dict[tuple[int, int], float]],
    bench_s: float,
) -> CpuUse:
    def delta(name: str) -> dict[tuple[int, int], float]:
        return {key: value - before[name].get(key, 0.0) for key, value in after[name].items()}

    amaris = delta("amaris")
    main_pid = stack.amaris.pid
    processes = [
        (
            f"amaris API process (pid {main_pid})",
            sum(v for (pid, _), v in amaris.items() if pid == main_pid),
        ),
        (
            "amaris's child processes (its Prefect server, the repair worker)",
            sum(v for (pid, _), v in amaris.items() if pid != main_pid),
        ),
        ("offline LLM", sum(delta("llm").values())),
        ("benchmark (load generator)", bench_s),
    ]
    names = thread_names(main_pid)
    busiest = sorted(
        ((tid, v) for (pid, tid), v in amaris.items() if pid == main_pid), key=lambda item: -item[1]
    )[:4]
    threads = [(f"{names.get(tid, '?')} (tid {tid})", v) for tid, v in busiest]
    return CpuUse(wall_s, processes, threads)


# -- report ------------------------------------------------------------------------------
@dataclass
class Report:
    rollouts: int
    latency_ms: float
    analyzer_concurrency: int
    wall_s: float
    lower_bound_s: float
    calls: CallStats
    idle: Probe
    busy: Probe
    timeline: Timeline | None
    scoring_s: float
    flow_s: float | None
    step_answer: dict[str, Any]
    started_at: float
    """Wall-clock time of ``POST /complete``."""
    cpu: CpuUse
    load_after: str

    @property
    def alone_bound_s(self) -> float:
        return self.calls.total_waves * self.calls.alone_latency_ms / 1000.0

    @property
    def overhead(self) -> float:
        return self.wall_s / self.lower_bound_s - 1.0

    @property
    def p99_ratio(self) -> float:
        return self.busy.pct(99) / self.idle.pct(99)

    def verdicts(self) -> list[tuple[str, str, str]]:
        over = self.overhead
        ratio = self.p99_ratio
        counts_ok = "PASS" if self.calls.match else "FAIL"
        return [
            (
                f"step wall time <= lower bound + {TARGET_OVERHEAD:.0%}",
                f"{self.wall_s:.2f} s vs {self.lower_bound_s:.2f} s (+{over:.1%})",
                "PASS" if over <= TARGET_OVERHEAD else "FAIL",
            ),
            (
                f"/score p99 during the step <= {TARGET_P99_RATIO:g} x idle p99",
                f"{self.busy.pct(99):.0f} ms vs {self.idle.pct(99):.0f} ms (x{ratio:.2f})",
                "PASS" if ratio <= TARGET_P99_RATIO and not self.busy.errors else "FAIL",
            ),
            (
                "LLM calls of the step = those the configuration implies",
                ", ".join(
                    f"{a} {self.calls.counts[a]}/{self.calls.expected[a]}" for a in LLM_AGENTS
                ),
                counts_ok,
            ),
        ]


def fmt(value: float, digits: int = 0) -> str:
    return "-" if value != value else f"{value:.{digits}f}"


def figures_table(r: Report) -> str:
    c = r.calls
    waves = " + ".join(f"{c.waves[a]}" for a in LLM_AGENTS if c.waves[a])
    names = " + ".join(a for a in LLM_AGENTS if c.waves[a])
    lines = [
        "| figure | value |",
        "|---|---:|",
        f"| rollouts in the step | {r.rollouts} |",
        f"| offline LLM latency (configured) | {r.latency_ms:g} ms |",
        f"| median latency of the step's LLM calls (measured) | {c.median_latency_ms:.1f} ms |",
        f"| step LLM calls: {', '.join(f'{a} {c.counts[a]}' for a in LLM_AGENTS)} "
        f"| {sum(c.counts.values())} |",
        f"| critical path in LLM waves ({names}) | {waves} = {c.total_waves} |",
        f"| **lower bound** ({c.total_waves} x {c.median_latency_ms:.1f} ms) "
        f"| **{r.lower_bound_s:.2f} s** |",
        f"| **step wall time** (`POST /complete` -> `/rubric_status/wait` answered) "
        f"| **{r.wall_s:.2f} s** |",
        f"| flow run `step-{MEASURED_STEP}` duration (Prefect) "
        f"| {'-' if r.flow_s is None else f'{r.flow_s:.2f} s'} |",
        f"| **overhead** over the lower bound | **{r.overhead:+.1%}** "
        f"({r.wall_s - r.lower_bound_s:.2f} s) |",
        f"| lower bound at the latency of calls made alone ({', '.join(ALONE_AGENTS)}: "
        f"median {c.alone_latency_ms:.1f} ms) | {r.alone_bound_s:.2f} s |",
        f"| overhead over that bound | {r.wall_s / r.alone_bound_s - 1:+.1%} "
        f"({r.wall_s - r.alone_bound_s:.2f} s) |",
        f"| scoring the {r.rollouts} rollouts (64 concurrent /score) | {r.scoring_s:.1f} s |",
    ]
    for probe in (r.idle, r.busy):
        lines.append(
            f"| /score {probe.name}: {len(probe.latencies_ms)} requests, {len(probe.errors)} "
            f"errors, p50 / p90 / p99 / max | {fmt(probe.pct(50))} / {fmt(probe.pct(90))} / "
            f"{fmt(probe.pct(99))} / {fmt(max(probe.latencies_ms, default=float('nan')))} ms |"
        )
    lines.append(f"| /score p99 during / idle | x{r.p99_ratio:.2f} |")
    lines.append(
        f"| slowest /score during the step (start from `POST /complete`) "
        f"| {r.busy.slowest(r.started_at)} |"
    )
    return "\n".join(lines)


def timeline_table(r: Report) -> str:
    lines = ["| from `POST /complete` | seconds |", "|---|---:|"]
    if r.timeline is None:
        lines.append("| (Prefect's task runs could not be read) | - |")
    else:
        lines += [f"| {what} | {value} |" for what, value in r.timeline.rows]
    lines += [f"| {what} | {value} |" for what, value in r.cpu.rows()]
    return "\n".join(lines)


def breakdown_table(r: Report) -> str:
    lines = ["| wall time - lower bound, by cause | seconds |", "|---|---:|"]
    if r.timeline is None:
        return "\n".join([*lines, "| (Prefect's task runs could not be read) | - |"])
    lines += [f"| {what} | {value:+.2f} |" for what, value in r.timeline.breakdown]
    total = sum(value for _, value in r.timeline.breakdown)
    lines.append(f"| **total** (= {r.wall_s:.2f} - {r.lower_bound_s:.2f}) | **{total:+.2f}** |")
    return "\n".join(lines)


def doc_figures(r: Report) -> str:
    """The page's figures: the bound, the wall time, ``/score`` during the step, CPU."""
    c = r.calls
    waves = " + ".join(f"{c.waves[a]}" for a in LLM_AGENTS if c.waves[a])
    amaris_cpu = sum(cpu for name, cpu in r.cpu.processes if name.startswith("amaris"))
    llm_cpu = sum(cpu for name, cpu in r.cpu.processes if name == "offline LLM")
    return "\n".join(
        [
            "| figure | value |",
            "|---|---:|",
            f"| LLM call latency, configured / median measured | {r.latency_ms:g} / "
            f"{c.median_latency_ms:.1f} ms |",
            f"| step LLM calls ({', '.join(f'{a} {c.counts[a]}' for a in LLM_AGENTS)}) "
            f"| {sum(c.counts.values())} |",
            f"| critical path in LLM waves | {waves} = {c.total_waves} |",
            f"| **lower bound** ({c.total_waves} x {c.median_latency_ms:.1f} ms) "
            f"| **{r.lower_bound_s:.2f} s** |",
            f"| **step wall time** (`POST /complete` -> `/rubric_status/wait` answered) "
            f"| **{r.wall_s:.2f} s** |",
            f"| **overhead** over the lower bound | **{r.overhead:+.1%}** "
            f"({r.wall_s - r.lower_bound_s:.2f} s) |",
            f"| overhead over the bound at the latency of calls made alone "
            f"| {r.wall_s / r.alone_bound_s - 1:+.1%} |",
            f"| /score p99 idle / during the step ({len(r.busy.errors)} errors) "
            f"| {fmt(r.idle.pct(99))} / {fmt(r.busy.pct(99))} ms |",
            f"| CPU during the step: amaris (with its children) / offline LLM "
            f"| {amaris_cpu:.2f} / {llm_cpu:.2f} s |",
        ]
    )


def doc_where(r: Report) -> str:
    """Where the step's time went: each stage's span and its part of wall - bound."""
    lines = [
        "| where the time went (from `POST /complete`) | span (s) | wall - bound (s) |",
        "|---|---:|---:|",
    ]
    t = r.timeline
    if t is None:
        return "\n".join([*lines, "| (Prefect's task runs could not be read) | - | - |"])
    lines += [f"| {what} | | {value:+.2f} |" for what, value in t.breakdown[:2]]
    for stage, (start, end, runs) in sorted(t.spans.items(), key=lambda item: item[1][0]):
        lines.append(
            f"| {stage} ({runs} task run{'s' if runs > 1 else ''}) | {start:.2f} -> {end:.2f} "
            f"| {t.stage_cost.get(stage, 0.0):+.2f} |"
        )
    total = sum(value for _, value in t.breakdown)
    return "\n".join([*lines, f"| **total** | | **{total:+.2f}** |"])


def section(r: Report, args: argparse.Namespace, started: datetime, load: str) -> str:
    return doc_section(
        "step_pipeline",
        "Step pipeline: wall time vs. the LLM critical path, `/score` during a step",
        f"One step of {r.rollouts} rollouts through the real pipeline, every LLM call "
        f"{args.latency_ms:g} ms (`amaris offline-llm`), timed from `POST /complete` to "
        "`/rubric_status/wait`, against its LLM critical path (the waves of calls it made); "
        f"{args.probe_concurrency} `/score` requests stay in flight before and during it.",
        f"{doc_figures(r)}\n\n{doc_where(r)}",
        script=__file__,
        when=started,
        load=f"{load} -> {r.load_after}",
        targets=r.verdicts(),
    )


# -- main ----------------------------------------------------------------------------------
async def measure(stack: Stack, args: argparse.Namespace) -> Report:
    url = stack.amaris_url
    limits = httpx2.Limits(max_connections=128, max_keepalive_connections=128)
    async with httpx2.AsyncClient(
        limits=limits, timeout=httpx2.Timeout(REQUEST_TIMEOUT_S), trust_env=False
    ) as client:
        t0 = time.perf_counter()
        await score_many(
            client, url, WARMUP_STEP, [step_rollout(WARMUP_STEP, i) for i in range(4)], 4
        )
        await run_step(client, url, WARMUP_STEP)
        print(
            f"warm-up step {WARMUP_STEP} done in {time.perf_counter() - t0:.1f} s "
            "(Prefect boot, MiniLM load)",
            flush=True,
        )
        await asyncio.to_thread(settle, stack.amaris, after_startup=False)

        t0 = time.perf_counter()
        await score_many(
            client,
            url,
            MEASURED_STEP,
            [step_rollout(MEASURED_STEP, i) for i in range(args.rollouts)],
            64,
        )
        scoring_s = time.perf_counter() - t0
        print(
            f"scored {args.rollouts} rollouts of step {MEASURED_STEP} in {scoring_s:.1f} s",
            flush=True,
        )
        await asyncio.to_thread(settle, stack.amaris, after_startup=False)

        numbers = itertools.count(100_000)
        idle = await probe_load(
            client,
            url,
            Probe("idle"),
            IDLE_PROBE_STEP,
            numbers,
            args.probe_concurrency,
            count=args.probe_requests,
        )
        print(
            f"idle /score: {len(idle.latencies_ms)} ok, p50 {idle.pct(50):.0f} ms, "
            f"p99 {idle.pct(99):.0f} ms",
            flush=True,
        )
        await asyncio.to_thread(settle, stack.amaris, after_startup=False)

        profiler = start_profiler(stack.amaris.pid, args.py_spy)
        try:
            cpu_before = {"amaris": thread_cpu(stack.amaris.pid), "llm": thread_cpu(stack.llm.pid)}
            bench_before = sum(os.times()[:2])
            stop = asyncio.Event()
            busy_task = asyncio.create_task(
                probe_load(
                    client,
                    url,
                    Probe("during the step"),
                    BUSY_PROBE_STEP,
                    numbers,
                    args.probe_concurrency,
                    stop=stop,
                )
            )
            try:
                started_at, wall_s, answer = await run_step(client, url, MEASURED_STEP)
            finally:
                stop.set()
            busy = await busy_task
            cpu_after = {"amaris": thread_cpu(stack.amaris.pid), "llm": thread_cpu(stack.llm.pid)}
            bench_s = sum(os.times()[:2]) - bench_before
            load_after = loadavg(all_three=True)
        finally:
            stop_profiler(profiler)
        print(
            f"step {MEASURED_STEP}: {wall_s:.2f} s; /score during it: "
            f"{len(busy.latencies_ms)} ok, p99 {busy.pct(99):.0f} ms",
            flush=True,
        )

    await asyncio.sleep(1.0)  # the call log is written by a background thread
    calls = call_stats(read_calls(stack.data_dir, MEASURED_STEP), args.rollouts, stack.config)
    print(f"judge calls of step {MEASURED_STEP}: {judge_calls(stack.data_dir, MEASURED_STEP)}")
    lower_bound_s = calls.total_waves * calls.median_latency_ms / 1000.0
    flow, tasks = await asyncio.to_thread(prefect_runs, stack.data_dir, MEASURED_STEP)
    line = timeline(started_at, wall_s, flow, tasks, calls, limit_of(stack.config, "analyzer"))
    return Report(
        rollouts=args.rollouts,
        latency_ms=args.latency_ms,
        analyzer_concurrency=args.analyzer_concurrency,
        wall_s=wall_s,
        lower_bound_s=lower_bound_s,
        calls=calls,
        idle=idle,
        busy=busy,
        timeline=line,
        scoring_s=scoring_s,
        flow_s=None if flow is None else flow.end - flow.start,
        step_answer=answer,
        started_at=started_at,
        cpu=cpu_use(stack, wall_s, cpu_before, cpu_after, bench_s),
        load_after=load_after,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--rollouts", type=int, default=256, help="rollouts in the measured step (default 256)"
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=1000.0,
        help="offline LLM latency per call (default 1000)",
    )
    parser.add_argument(
        "--analyzer-concurrency", type=int, default=32, help="concurrency.analyzer (default 32)"
    )
    parser.add_argument(
        "--probe-requests",
        type=int,
        default=200,
        help="/score requests of the idle latency probe (default 200)",
    )
    parser.add_argument(
        "--probe-concurrency",
        type=int,
        default=4,
        help="/score requests in flight in the probes (default 4)",
    )
    parser.add_argument(
        "--auditor",
        action="store_true",
        help="turn the audit judge on (client.auditor on the same offline LLM): its task "
        "runs before the scopes; compare with a run without it",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the servers' files (logs, data) in this folder",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="FILE",
        help="record amaris and its children with py-spy during the step, to FILE "
        "(.json: Chrome trace with timestamps, .svg: flame graph, "
        ".speedscope, else raw collapsed stacks)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "benchmarks.md",
        help="markdown file to update (default docs/benchmarks.md)",
    )
    args = parser.parse_args(argv)
    if (
        args.rollouts < 1
        or args.analyzer_concurrency < 1
        or args.probe_requests < 1
        or args.probe_concurrency < 1
        or args.latency_ms < 0
    ):
        parser.error("counts must be >= 1 and --latency-ms >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started = datetime.now(UTC)
    load = loadavg(all_three=True)
    try:
        config = {
            "concurrency": {"analyzer": args.analyzer_concurrency},
            "pipeline": {"rollouts_per_step": None, "chunk_size": CHUNK_SIZE},
            # A free port for amaris's Prefect server: the default (4200) is shared by
            # every amaris on the machine, and another one's server could answer ours.
            "prefect": {"port": None},
        }
        if args.auditor:
            config["client"] = {"auditor": {}}
        with (
            work_folder("amaris-step-bench-", args.keep) as workdir,
            running_stack(args.latency_ms, workdir, config) as stack,
        ):
            report = asyncio.run(measure(stack, args))
    except KeyboardInterrupt:
        print("interrupted; servers stopped, nothing written", file=sys.stderr)
        return 130
    print()
    print(figures_table(report))
    print()
    print(timeline_table(report))
    print()
    print(breakdown_table(report))
    print()
    for name, measured, verdict in report.verdicts():
        print(f"{verdict:<5} {name}: {measured}")
    out: Path = args.out
    write_doc(out, section(report, args, started, load), MARK_START, MARK_END)
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
