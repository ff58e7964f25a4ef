"""Overload: does ``amaris serve`` stay responsive at 4x its judge's capacity, and recover?

Starts processes it owns, bound to 127.0.0.1 on free ports, and stops them by PID at the
end (also on error or Ctrl-C):

* ``amaris offline-llm --latency-ms 200``: the rule-based judge behind an
  OpenAI-compatible API, sleeping 200 ms per request (a stand-in for a real LLM);
* ``amaris serve`` with a temporary configuration: the judge on that server,
  ``concurrency.scorer: 8``, ``scoring.max_pending: 32``, ``scoring.retry_after_seconds: 1``,
  the score cache off, the ``hashing`` embedder, ``logging.level: WARNING``, no scheduled
  repair. The judge's capacity is ``concurrency.scorer / latency`` = 8 / 0.2 s = 40
  rollouts/s (read back from the configuration);
* a prober (this script with ``--probe``, its own process, so the load generator's event
  loop cannot delay it): ``GET /healthz`` every 100 ms, one at a time, latency recorded.

Load: open loop (requests launched at a fixed rate whatever the answers, one task each, one
``AsyncClient`` with ample connections, a unique rollout per request so no cache or
in-flight merge answers it), after a short warm-up, in three phases of ``--phase-seconds``:
(a) 0.5x capacity, (b) 4x capacity, (c) 0.5x capacity. Latency of a request is measured from
its *scheduled* send time (no coordinated omission). Per phase: offered rate, 200 (scored)
per second, 429 per second (each checked for ``Retry-After``), other outcomes, latency
percentiles, ``/healthz`` latency, CPU of each process; and the recovery time after the
overload: from the start of (c) until every 1 s window of requests (by send time, sliding by
100 ms) has no 429 and a ``/score`` p99 within 1.5x the p99 of (a).

Results are printed and written between the ``overload`` markers of ``docs/benchmarks.md``.

Usage::

    .venv/bin/python -m bench.probes.overload [--phase-seconds 20] [--out docs/benchmarks.md]
        [--http-client httpx2|httpx] [--keep DIR] [--py-spy FILE] [--gc-log FILE]
        [--gc-freeze] [--smoke]

The client is ``httpx2.AsyncClient`` by default (the httpx fork the ``openai`` SDK inside
amaris uses): ``httpx`` 0.28's pool does O(connections^2) work per request, which would make
the load generator, not the server, the bottleneck at hundreds of connections (see
``bench/performance/score_throughput.py``). ``--keep DIR`` keeps the servers' logs and data
folder, and
writes every request and probe there (``samples.jsonl``, ``probes.jsonl``, ``phases.json``,
monotonic times); ``--py-spy FILE`` records amaris with py-spy during the load (``pip install
py-spy`` first; a ``.json`` file gets a Chrome trace with timestamps; it pauses amaris per
sample, which skews the run); ``--gc-log FILE`` logs amaris's garbage collections (generation
2, or any >= 5 ms: monotonic start, duration, generation) by running it in a small wrapper
interpreter; ``--gc-freeze`` (an experiment, with ``--gc-log``) then calls ``gc.collect();
gc.freeze()`` in amaris once it is idle after start-up. ``--smoke``: phases of
:data:`SMOKE_PHASE_S` seconds (its verdicts then say little).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import yaml

from amaris.app.running import free_port, send_signal
from amaris.settings import Settings, load_settings
from bench._common import (
    API_KEY,
    CLK_TCK,
    PY_SPY_FORMATS,
    QUESTION,
    REFERENCE,
    ROOT,
    Child,
    amaris_executable,
    child_env,
    cpu_seconds,
    doc_section,
    fmt,
    loadavg,
    markers,
    open_client,
    raise_interrupt,
    report_path,
    require_py_spy,
    settle,
    start_offline_llm,
    stop_profiler,
    this_script,
    wait_servers_ready,
    work_folder,
    write_doc,
)
from bench._common import percentile as pct

MARK_START, MARK_END = markers("overload")

# The setup measured: the judge, its concurrency and the admission bound.
JUDGE_LATENCY_MS = 200.0
SCORER_CONCURRENCY = 8
MAX_PENDING = 32
RETRY_AFTER_S = 1
PHASES: tuple[tuple[str, float], ...] = (("a", 0.5), ("b", 4.0), ("c", 0.5))
"""(name, offered load as a multiple of the judge's capacity)."""
WARMUP_S = 2.0
WARMUP_LOAD = 0.5
SMOKE_PHASE_S = 2.0

# Verdicts.
HEALTHZ_P99_TARGET_MS = 100.0
BOUND_FACTOR = 3.0
"""Accepted /score p99 during (b) must stay under BOUND_FACTOR x the ideal worst wait."""
RECOVERY_TARGET_S = 5.0
RECOVERY_P99_FACTOR = 1.5
WINDOW_S = 1.0
WINDOW_STEP_S = 0.1

MAX_GENERATOR_LAG_MS = 50.0
MAX_OTHERS_CORES = 0.5
"""Beyond either, in any phase, the run is contended: a failure is reported INCONCLUSIVE."""

PROBE_INTERVAL_S = 0.1
PROBE_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 40.0
CONNECTIONS = 1024
LOADAVG: dict[str, str] = {"start": "-", "end": "-"}


# -- processes -----------------------------------------------------------------------------
def machine_busy_seconds() -> float | None:
    """CPU time the whole machine spent busy (all cores, from ``/proc/stat``), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


@dataclass
class Stack:
    llm: Child
    amaris: Child
    prober: Child
    llm_url: str
    amaris_url: str
    settings: Settings
    probe_log: Path


def bench_config(llm_url: str, data: Path) -> dict[str, Any]:
    return {
        # The offline judge on 127.0.0.1 stands for a hosted one: no per-endpoint
        # limit (a judge on this machine gets 4 in flight by default).
        "client": {"default": {"base_url": llm_url, "api_key": API_KEY, "max_concurrency": 0}},
        "server": {"host": "127.0.0.1"},
        "concurrency": {"scorer": SCORER_CONCURRENCY},
        "scoring": {
            "max_pending": MAX_PENDING,
            "retry_after_seconds": RETRY_AFTER_S,
            "cache_size": 0,
        },
        "memory": {"embedding_model": "hashing", "path": str(data)},
        "logging": {"level": "WARNING"},
        "prefect": {"repair_interval_seconds": None},
    }


GC_WRAPPER = """
import gc, signal, sys, time
from amaris.cli.main import main
log = open(sys.argv[1], "a", buffering=1)
started = {}
def record(phase, info):
    if phase == "start":
        started["t"] = time.monotonic()
        return
    t0 = started.pop("t", None)
    if t0 is None:
        return
    ms = (time.monotonic() - t0) * 1000.0
    if info["generation"] == 2 or ms >= 5.0:
        log.write(f"G {t0:.6f} {ms:.3f} {info['generation']} {info['collected']}\\n")
gc.callbacks.append(record)
def freeze(signum, frame):
    tracked = len(gc.get_objects())
    gc.collect()
    gc.freeze()
    log.write(f"F {time.monotonic():.6f} tracked {tracked} frozen {gc.get_freeze_count()}\\n")
signal.signal(signal.SIGUSR1, freeze)
sys.exit(main(sys.argv[2:]))
"""
"""``amaris`` with every generation-2 collection (and any of 5 ms or more) logged as
``G <monotonic start> <ms> <generation> <collected>``; on SIGUSR1 it moves every object
alive to the permanent generation (``gc.collect(); gc.freeze()``), logged as ``F``."""


@contextmanager
def running_stack(
    workdir: Path, gc_log: Path | None = None, gc_freeze: bool = False
) -> Iterator[Stack]:
    """Start the offline LLM, amaris and the prober; stop them all on exit."""
    exe = amaris_executable()
    env = child_env()
    children: list[Child] = []
    try:
        llm, llm_url = start_offline_llm(exe, JUDGE_LATENCY_MS, workdir, env)
        children.append(llm)
        config_path = workdir / "config.yaml"
        config_path.write_text(
            yaml.safe_dump(bench_config(llm_url, workdir / "data"), sort_keys=False),
            encoding="utf-8",
        )
        amaris_port = free_port()
        serve = ["serve", "--config", str(config_path), "--port", str(amaris_port)]
        # With --gc-log: the same command, in an interpreter that logs its collections.
        argv = (
            [exe, *serve]
            if gc_log is None
            else [sys.executable, "-c", GC_WRAPPER, str(gc_log.resolve()), *serve]
        )
        amaris = Child("amaris", argv, workdir / "amaris.log", workdir, env)
        children.append(amaris)
        amaris_url = f"http://127.0.0.1:{amaris_port}"
        wait_servers_ready(llm, llm_url, amaris, amaris_url)
        settle(amaris)
        if gc_freeze:
            # An experiment, not amaris's behaviour: freeze start-up objects out of the GC.
            send_signal(amaris.pid, signal.SIGUSR1)
            time.sleep(2.0)
            settle(amaris)
        probe_log = workdir / "probe.log"
        prober = Child(
            "prober",
            [*this_script(__spec__.name), "--probe", f"{amaris_url}/healthz"],
            probe_log,
            ROOT,
            env,
        )
        children.append(prober)
        print(
            f"offline-llm pid {llm.pid} ({llm_url}), amaris pid {amaris.pid} "
            f"({amaris_url}), prober pid {prober.pid}; logs in {workdir}",
            flush=True,
        )
        yield Stack(llm, amaris, prober, llm_url, amaris_url, load_settings(config_path), probe_log)
    finally:
        # Prober, then amaris (it holds connections to the LLM), then the LLM.
        for child in reversed(children):
            child.stop()


# -- the prober (its own process) ----------------------------------------------------------
def probe_main(url: str) -> int:
    """``GET url`` every PROBE_INTERVAL_S, one at a time; one line per probe on stdout:
    ``P <monotonic send time> <latency ms> <status or error>``. Runs until terminated."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    with httpx2.Client(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
        next_at = time.monotonic()
        while True:
            now = time.monotonic()
            if next_at > now:
                time.sleep(next_at - now)
            t0 = time.monotonic()
            try:
                outcome = str(client.get(url).status_code)
            except httpx2.HTTPError as exc:
                outcome = type(exc).__name__
            elapsed_ms = (time.monotonic() - t0) * 1000.0
            sys.stdout.write(f"P {t0:.6f} {elapsed_ms:.3f} {outcome}\n")
            sys.stdout.flush()
            # The next tick on the 100 ms grid after this probe (a slow probe skips ticks).
            next_at += PROBE_INTERVAL_S * max(
                1, math.ceil((time.monotonic() - next_at) / PROBE_INTERVAL_S)
            )


@dataclass
class Probe:
    sent: float
    latency_ms: float
    outcome: str


def read_probes(path: Path) -> list[Probe]:
    probes: list[Probe] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "P":
            with suppress(ValueError):
                probes.append(Probe(float(parts[1]), float(parts[2]), parts[3]))
    return probes


# -- load ----------------------------------------------------------------------------------
@dataclass
class Sample:
    """One ``/score`` request."""

    phase: str
    scheduled: float
    """Monotonic time it was due to be sent (the open-loop schedule)."""
    lag_ms: float
    """How late the load generator launched it."""
    latency_ms: float
    """From ``scheduled`` to the answer (or the error)."""
    outcome: str
    """``scored``, ``unscored``, ``429``, ``HTTP <code>`` or an exception name."""
    retry_after: str | None = None
    detail: str | None = None
    """The exception's text, for an error (kept in ``--keep``'s ``samples.jsonl``)."""


@dataclass
class Phase:
    name: str
    load: float
    rate: float
    start: float
    end: float
    cpu: dict[str, float | None] = field(default_factory=dict)
    """Cores used on average during the phase: by each process, the machine, the others."""


def rollout_body(run: str, n: int) -> dict[str, Any]:
    """Rollout ``n`` of this run: unique, so no cache or in-flight merge answers it."""
    output = (
        f"Each pencil costs 45 / 3 = 15 cents, so 7 pencils cost 7 * 15 = 105 cents. "
        f"Final answer: 105. [overload {run} sample {n}]"
    )
    return {
        "rollout": {
            "id": f"overload-{run}-{n}",
            "input": QUESTION,
            "output": output,
            "supplemental_context": REFERENCE,
        },
        "metadata": {"current_step": 0},
    }


async def run_load(
    stack: Stack, capacity: float, phase_s: float, http_client: str
) -> tuple[list[Phase], list[Sample], int]:
    """Warm-up, then the phases, open loop; returns the phases, the samples and the number
    of requests still unanswered after DRAIN_TIMEOUT_S."""
    url = f"{stack.amaris_url}/score"
    run = uuid.uuid4().hex[:8]
    samples: list[Sample] = []
    counter = itertools.count()
    pids: dict[str, int | None] = {
        "amaris": stack.amaris.pid,
        "llm": stack.llm.pid,
        "bench": None,
        "prober": stack.prober.pid,
    }
    loop = asyncio.get_running_loop()
    origin = loop.time() + 0.2
    schedule = [("warm-up", WARMUP_LOAD, WARMUP_S), *((n, m, phase_s) for n, m in PHASES)]
    phases: list[Phase] = []
    t = origin
    for name, load, seconds in schedule:
        phases.append(Phase(name, load, load * capacity, t, t + seconds))
        t += seconds

    async with open_client(http_client, CONNECTIONS, REQUEST_TIMEOUT_S) as client:

        async def one(phase: str, scheduled: float) -> None:
            lag_ms = (loop.time() - scheduled) * 1000.0
            retry_after: str | None = None
            detail: str | None = None
            try:
                response = await client.post(url, json=rollout_body(run, next(counter)))
                code = response.status_code
                if code == 200:
                    outcome = str(response.json().get("status"))
                elif code == 429:
                    outcome = "429"
                    retry_after = response.headers.get("retry-after")
                else:
                    outcome = f"HTTP {code}"
            except Exception as exc:  # recorded as an outcome: the run must go on
                outcome = type(exc).__name__
                detail = repr(exc)[:300]
            samples.append(
                Sample(
                    phase,
                    scheduled,
                    lag_ms,
                    (loop.time() - scheduled) * 1000.0,
                    outcome,
                    retry_after,
                    detail,
                )
            )

        async def cpu_probe() -> None:
            previous: dict[str, float | None] = {}
            previous_at = 0.0
            for i, phase in enumerate([*phases, None]):
                at = phase.start if phase is not None else phases[-1].end
                await asyncio.sleep(max(0.0, at - loop.time()))
                now: dict[str, float | None] = {
                    name: cpu_seconds(pid) for name, pid in pids.items()
                }
                now["machine"] = machine_busy_seconds()
                now_at = loop.time()
                if i > 0:
                    done = phases[i - 1]
                    for name, value in now.items():
                        before = previous.get(name)
                        done.cpu[name] = (
                            None
                            if value is None or before is None
                            else (value - before) / (now_at - previous_at)
                        )
                    ours = [done.cpu.get(name) for name in pids]
                    total = done.cpu.get("machine")
                    done.cpu["others"] = (
                        None
                        if total is None or None in ours
                        else max(0.0, total - sum(v or 0.0 for v in ours))
                    )
                previous, previous_at = now, now_at

        tasks: set[asyncio.Task[None]] = set()
        cpu_task = asyncio.create_task(cpu_probe())
        for phase in phases:
            for k in itertools.count():
                scheduled = phase.start + k / phase.rate
                if scheduled >= phase.end:
                    break
                delay = scheduled - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(phase.name, scheduled))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            print(
                f"  phase {phase.name}: {phase.rate:g} req/s offered for "
                f"{phase.end - phase.start:g} s",
                flush=True,
            )
        await cpu_task
        unanswered = 0
        if tasks:
            _, pending = await asyncio.wait(set(tasks), timeout=DRAIN_TIMEOUT_S)
            unanswered = len(pending)
            for task in pending:
                task.cancel()
            with suppress(asyncio.CancelledError):
                await asyncio.gather(*pending, return_exceptions=True)
    return [p for p in phases if p.name != "warm-up"], samples, unanswered


@dataclass
class PhaseStats:
    phase: Phase
    launched: int
    scored: int
    refused: int
    refused_without_retry_after: int
    other: Counter[str]
    scored_ms: list[float]
    refused_ms: list[float]
    lag_ms: list[float]
    healthz_ms: list[float]
    healthz_failed: int

    @property
    def seconds(self) -> float:
        return self.phase.end - self.phase.start


def phase_stats(phase: Phase, samples: list[Sample], probes: list[Probe]) -> PhaseStats:
    mine = [s for s in samples if s.phase == phase.name]
    probed = [p for p in probes if phase.start <= p.sent < phase.end]
    return PhaseStats(
        phase=phase,
        launched=len(mine),
        scored=sum(s.outcome == "scored" for s in mine),
        refused=sum(s.outcome == "429" for s in mine),
        refused_without_retry_after=sum(
            s.outcome == "429" and s.retry_after != str(RETRY_AFTER_S) for s in mine
        ),
        other=Counter(s.outcome for s in mine if s.outcome not in {"scored", "429"}),
        scored_ms=[s.latency_ms for s in mine if s.outcome == "scored"],
        refused_ms=[s.latency_ms for s in mine if s.outcome == "429"],
        lag_ms=[s.lag_ms for s in mine],
        healthz_ms=[p.latency_ms for p in probed if p.outcome == "200"],
        healthz_failed=sum(p.outcome != "200" for p in probed),
    )


@dataclass
class Window:
    offset: float
    sent: int
    scored: int
    refused: int
    other: int
    p99_ms: float

    def good(self, threshold_ms: float) -> bool:
        return (
            self.refused == 0
            and self.other == 0
            and self.scored > 0
            and self.p99_ms <= threshold_ms
        )


def windows(phase: Phase, samples: list[Sample]) -> list[Window]:
    """1 s windows of the phase's requests by send time, sliding by WINDOW_STEP_S."""
    mine = [s for s in samples if s.phase == phase.name]
    out: list[Window] = []
    steps = round((phase.end - phase.start - WINDOW_S) / WINDOW_STEP_S)
    for i in range(steps + 1):
        offset = i * WINDOW_STEP_S
        lo = phase.start + offset
        inside = [s for s in mine if lo <= s.scheduled < lo + WINDOW_S]
        scored = [s.latency_ms for s in inside if s.outcome == "scored"]
        refused = sum(s.outcome == "429" for s in inside)
        out.append(
            Window(
                offset,
                len(inside),
                len(scored),
                refused,
                len(inside) - len(scored) - refused,
                pct(scored, 99),
            )
        )
    return out


def recovery_time(phase_c: Phase, samples: list[Sample], threshold_ms: float) -> float | None:
    """Earliest offset into (c) from which every 1 s window is good; None if never."""
    found: float | None = None
    for w in reversed(windows(phase_c, samples)):
        if not w.good(threshold_ms):
            break
        found = w.offset
    return found


# -- report --------------------------------------------------------------------------------
def others_text(other: Counter[str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(other.items())) or "0"


def results_table(stats: list[PhaseStats], capacity: float) -> str:
    lines = [
        f"`/score` (judge capacity {capacity:g} rollouts/s):",
        "",
        "| phase | load | offered (req/s) | 200 scored (/s) | 429 (/s) "
        "| 429 without Retry-After | other | 200 p50 (ms) | 200 p99 (ms) | 429 p50 (ms) "
        "| 429 p99 (ms) |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for s in stats:
        lines.append(
            f"| ({s.phase.name}) | {s.phase.load:g}x | {s.launched / s.seconds:.1f} "
            f"| {s.scored / s.seconds:.1f} | {s.refused / s.seconds:.1f} "
            f"| {s.refused_without_retry_after} | {others_text(s.other)} "
            f"| {fmt(pct(s.scored_ms, 50))} | {fmt(pct(s.scored_ms, 99))} "
            f"| {fmt(pct(s.refused_ms, 50))} | {fmt(pct(s.refused_ms, 99))} |"
        )
    lines += [
        "",
        'Responsiveness and the machine (CPU: cores used on average; "others": every '
        "process not started by this benchmark):",
        "",
        "| phase | /healthz probes | /healthz p50 (ms) | /healthz p99 (ms) "
        "| /healthz max (ms) | load generator lag p99 (ms) | CPU amaris | CPU LLM "
        "| CPU bench | CPU prober | CPU others |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stats:
        cpu = s.phase.cpu

        def cores(name: str, cpu: dict[str, float | None] = cpu) -> str:
            return fmt(cpu.get(name), 2)

        healthz = f"{len(s.healthz_ms)}" + (
            f" ({s.healthz_failed} failed)" if s.healthz_failed else ""
        )
        lines.append(
            f"| ({s.phase.name}) | {healthz} | {fmt(pct(s.healthz_ms, 50))} "
            f"| {fmt(pct(s.healthz_ms, 99))} | {fmt(max(s.healthz_ms, default=float('nan')))} "
            f"| {fmt(pct(s.lag_ms, 99))} | {cores('amaris')} | {cores('llm')} "
            f"| {cores('bench')} | {cores('prober')} | {cores('others')} |"
        )
    return "\n".join(lines)


def recovery_table(
    phase_c: Phase, samples: list[Sample], threshold_ms: float, seconds: int = 6
) -> str:
    lines = [
        "| window of (c) (s) | sent | 200 scored | 429 | other | /score 200 p99 (ms) | good |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for w in windows(phase_c, samples):
        if w.offset > seconds - WINDOW_S + 1e-9:
            break
        if round(w.offset / WINDOW_STEP_S) % 5:
            continue
        lines.append(
            f"| {w.offset:.1f}-{w.offset + WINDOW_S:.1f} | {w.sent} | {w.scored} "
            f"| {w.refused} | {w.other} | {fmt(w.p99_ms)} "
            f"| {'yes' if w.good(threshold_ms) else 'no'} |"
        )
    return "\n".join(lines)


@dataclass
class Verdicts:
    bound_ms: float
    threshold_ms: float
    recovery_s: float | None
    checks: list[tuple[str, str, bool]]
    """(check, measured, passed) of "stays responsive"."""
    contention: list[str]
    """Why the machine, not amaris, may explain a failure (empty: a clean run)."""

    @property
    def responsive(self) -> bool:
        return all(ok for _, _, ok in self.checks)

    @property
    def recovers(self) -> bool:
        return self.recovery_s is not None and self.recovery_s < RECOVERY_TARGET_S


def judge(stats: list[PhaseStats], samples: list[Sample], unanswered: int) -> Verdicts:
    by = {s.phase.name: s for s in stats}
    a, b, c = by["a"], by["b"], by["c"]
    waves = math.ceil(MAX_PENDING / SCORER_CONCURRENCY)
    bound_ms = BOUND_FACTOR * JUDGE_LATENCY_MS * MAX_PENDING / SCORER_CONCURRENCY
    threshold_ms = RECOVERY_P99_FACTOR * pct(a.scored_ms, 99)
    healthz_p99 = pct(b.healthz_ms, 99)
    scored_p99 = pct(b.scored_ms, 99)
    refused_p99 = pct(b.refused_ms, 99)
    checks = [
        (
            f"/healthz p99 during (b) < {HEALTHZ_P99_TARGET_MS:g} ms, no failed probe",
            f"{fmt(healthz_p99)} ms, {b.healthz_failed} failed",
            healthz_p99 < HEALTHZ_P99_TARGET_MS and b.healthz_failed == 0,
        ),
        (
            f"accepted /score p99 during (b) < {bound_ms:g} ms "
            f"({BOUND_FACTOR:g} x {JUDGE_LATENCY_MS:g} ms x {MAX_PENDING}/{SCORER_CONCURRENCY}; "
            f"ideal worst wait {waves * JUDGE_LATENCY_MS:g} ms)",
            f"{fmt(scored_p99)} ms",
            scored_p99 < bound_ms,
        ),
        (
            "excess load refused with 429 + Retry-After during (b)",
            f"{b.refused / b.seconds:.1f}/s refused, {b.refused_without_retry_after} without "
            f"Retry-After: {RETRY_AFTER_S}",
            b.refused > 0 and b.refused_without_retry_after == 0,
        ),
        (
            f"refusals are immediate, not queued: 429 p99 during (b) < judge latency "
            f"({JUDGE_LATENCY_MS:g} ms)",
            f"{fmt(refused_p99)} ms",
            refused_p99 < JUDGE_LATENCY_MS,
        ),
        (
            "every request answered 200 scored or 429 (no timeout, error, unscored)",
            f"other: {others_text(a.other + b.other + c.other)}; unanswered: {unanswered}",
            not (a.other + b.other + c.other) and unanswered == 0,
        ),
    ]
    contention: list[str] = []
    for s in stats:
        lag = pct(s.lag_ms, 99)
        if lag > MAX_GENERATOR_LAG_MS:
            contention.append(
                f"the load generator launched requests late in ({s.phase.name}) "
                f"(p99 {lag:.0f} ms > {MAX_GENERATOR_LAG_MS:g} ms)"
            )
        others = s.phase.cpu.get("others")
        if others is not None and others > MAX_OTHERS_CORES:
            contention.append(
                f"other processes used {others:.2f} cores during "
                f"({s.phase.name}) (> {MAX_OTHERS_CORES:g})"
            )
    return Verdicts(
        bound_ms, threshold_ms, recovery_time(c.phase, samples, threshold_ms), checks, contention
    )


def outcome(passed: bool, contention: list[str]) -> str:
    """PASS, FAIL, or INCONCLUSIVE for a failure on a contended machine."""
    if passed:
        return "PASS"
    return "INCONCLUSIVE (machine contended; rerun)" if contention else "FAIL"


def verdict_lines(v: Verdicts) -> str:
    lines = ["| verdict | check | measured | result |", "|---|---|---|---|"]
    for name, measured, ok in v.checks:
        lines.append(
            f"| stays responsive at 4x capacity | {name} | {measured} "
            f"| {'PASS' if ok else 'FAIL'} |"
        )
    lines.append(
        f"| **stays responsive at 4x capacity** | all of the above | | "
        f"**{outcome(v.responsive, v.contention)}** |"
    )
    recovery = "never (within the phase)" if v.recovery_s is None else f"{v.recovery_s:.1f} s"
    lines.append(
        f"| **recovers** | recovery time < {RECOVERY_TARGET_S:g} s | {recovery} "
        f"| **{outcome(v.recovers, v.contention)}** |"
    )
    lines.append("")
    if v.contention:
        lines.append(
            "Run contended (a PASS stands, a FAIL is reported INCONCLUSIVE): "
            + "; ".join(v.contention)
            + "."
        )
    else:
        lines.append(
            f"Run clean: the load generator kept its schedule (launch lag p99 <= "
            f"{MAX_GENERATOR_LAG_MS:g} ms) and other processes used <= "
            f"{MAX_OTHERS_CORES:g} core in every phase."
        )
    return "\n".join(lines)


def read_gc_log(path: Path | None) -> tuple[list[tuple[float, float, int]], int | None]:
    """(monotonic start, ms, generation) of the logged collections; objects frozen."""
    if path is None or not path.is_file():
        return [], None
    collections: list[tuple[float, float, int]] = []
    frozen: int | None = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split()
        with suppress(ValueError, IndexError):
            if parts[0] == "G":
                collections.append((float(parts[1]), float(parts[2]), int(parts[3])))
            elif parts[0] == "F":
                frozen = int(parts[parts.index("frozen") + 1])
    return collections, frozen


def gc_text(args: argparse.Namespace, stats: list[PhaseStats], probes: list[Probe]) -> str:
    """With --gc-log: amaris's generation-2 collections per phase, and the probes they hit."""
    collections, frozen = read_gc_log(args.gc_log)
    if args.gc_log is None:
        return ""
    freeze = f", `--gc-freeze`: {frozen} start-up objects frozen" if args.gc_freeze else ""
    lines = [
        "",
        f"Garbage collections in amaris (`--gc-log`{freeze}):",
        "",
        "| phase | generation-2 collections | their pauses (ms) "
        "| slowest /healthz probe overlapping one (ms) |",
        "|---|---:|---|---:|",
    ]
    for s in stats:
        mine = [
            (t, ms) for t, ms, gen in collections if gen == 2 and s.phase.start <= t < s.phase.end
        ]
        hit = [
            p.latency_ms
            for p in probes
            for t, ms in mine
            if p.sent <= t + ms / 1000.0 and t <= p.sent + p.latency_ms / 1000.0
        ]
        lines.append(
            f"| ({s.phase.name}) | {len(mine)} "
            f"| {', '.join(f'{ms:.0f}' for _, ms in mine) or '-'} "
            f"| {fmt(max(hit, default=float('nan')))} |"
        )
    return "\n".join(lines) + "\n"


def counters_text(counters: dict[str, Any], stats: list[PhaseStats]) -> str:
    """amaris's own counters, checked against the 429s the load generator saw."""
    if not counters:
        return "Server counters: not available."
    seen = sum(s.refused for s in stats)
    listed = ", ".join(f"`{k}` {v}" for k, v in sorted(counters.items()))
    return (
        f"Server counters at the end (`/healthz`): {listed}; the load generator counted "
        f"{seen} answers 429 (`overloaded` counts every refusal, warm-up included)."
    )


def doc_table(stats: list[PhaseStats]) -> str:
    """One row per phase: what was offered, answered, how fast, and the machine's load."""
    lines = [
        "| phase | load | offered (req/s) | 200 scored (/s) | 429 (/s) | other "
        "| 200 p50 / p99 (ms) | 429 p99 (ms) | /healthz p99 / max (ms) | CPU others (cores) |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for s in stats:
        lines.append(
            f"| ({s.phase.name}) | {s.phase.load:g}x | {s.launched / s.seconds:.1f} "
            f"| {s.scored / s.seconds:.1f} | {s.refused / s.seconds:.1f} "
            f"| {others_text(s.other)} "
            f"| {fmt(pct(s.scored_ms, 50))} / {fmt(pct(s.scored_ms, 99))} "
            f"| {fmt(pct(s.refused_ms, 99))} "
            f"| {fmt(pct(s.healthz_ms, 99))} / {fmt(max(s.healthz_ms, default=float('nan')))} "
            f"| {fmt(s.phase.cpu.get('others'), 2)} |"
        )
    return "\n".join(lines)


def section(
    stats: list[PhaseStats],
    verdicts: Verdicts,
    capacity: float,
    args: argparse.Namespace,
    started: datetime,
) -> str:
    recovery_s = verdicts.recovery_s
    recovery = "never (within the phase)" if recovery_s is None else f"{recovery_s:.1f} s"
    targets = [
        (f"stays responsive: {name}", measured, outcome(ok, verdicts.contention))
        for name, measured, ok in verdicts.checks
    ]
    targets.append(
        (
            f"recovers: every 1 s window of (c) good (no 429, /score p99 within "
            f"{RECOVERY_P99_FACTOR:g}x (a)'s) within {RECOVERY_TARGET_S:g} s",
            recovery,
            outcome(verdicts.recovers, verdicts.contention),
        )
    )
    return doc_section(
        "overload",
        "Overload: 4x the judge's capacity, then back",
        f"Open-loop `/score` load (a unique rollout a request) at 0.5x, 4x, then 0.5x the "
        f"judge's capacity ({SCORER_CONCURRENCY} judge calls at a time of "
        f"{JUDGE_LATENCY_MS:g} ms = {capacity:g} rollouts/s, `scoring.max_pending: "
        f"{MAX_PENDING}`), {args.phase_seconds:g} s a phase, while a process of its own probes "
        f"`/healthz` every {PROBE_INTERVAL_S * 1000:g} ms; a failure on a contended machine "
        "reads INCONCLUSIVE.",
        doc_table(stats),
        script=__file__,
        when=started,
        load=f"{LOADAVG['start']} -> {LOADAVG['end']}",
        targets=targets,
    )


def timeline(phases: list[Phase], samples: list[Sample], probes: list[Probe]) -> str:
    """Per second of the run: sent, scored, refused, other, /score p99, /healthz max."""
    lines = ["  second  phase  sent  scored   429  other  score p99 ms  healthz max ms"]
    origin = phases[0].start
    end = phases[-1].end
    for second in range(math.ceil(end - origin)):
        lo = origin + second
        inside = [s for s in samples if lo <= s.scheduled < lo + 1 and s.phase != "warm-up"]
        phase = next((p.name for p in phases if p.start <= lo < p.end), "-")
        scored = [s.latency_ms for s in inside if s.outcome == "scored"]
        refused = sum(s.outcome == "429" for s in inside)
        healthz = [p.latency_ms for p in probes if lo <= p.sent < lo + 1]
        lines.append(
            f"  {second:>6}  {phase:>5}  {len(inside):>4}  {len(scored):>6}  "
            f"{refused:>4}  {len(inside) - len(scored) - refused:>5}  "
            f"{fmt(pct(scored, 99)):>12}  {fmt(max(healthz, default=float('nan'))):>14}"
        )
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--phase-seconds", type=float, default=20.0, help="seconds of each phase (default 20)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="markdown file to update (default docs/benchmarks.md; with --smoke, none)",
    )
    parser.add_argument(
        "--http-client",
        choices=["httpx2", "httpx"],
        default="httpx2",
        help="load generator's client library (default httpx2, see above)",
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="keep the servers' logs and data in this folder"
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        dest="py_spy",
        help="record amaris with py-spy during the load (.json: Chrome trace "
        "with timestamps, .svg: flame graph, else raw stacks)",
    )
    parser.add_argument(
        "--gc-log",
        type=Path,
        default=None,
        dest="gc_log",
        help="run amaris in an interpreter logging its garbage collections "
        "(generation 2, or >= 5 ms) to this file, monotonic times",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="experiment (needs --gc-log): once amaris is idle after start-up, "
        "gc.collect() + gc.freeze() in it (SIGUSR1 to the wrapper)",
    )
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_PHASE_S:g} s phases")
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.phase_seconds = SMOKE_PHASE_S
    args.out = report_path(args.out, args.smoke)
    if args.gc_freeze and args.gc_log is None:
        parser.error("--gc-freeze needs --gc-log")
    if args.phase_seconds < WINDOW_S + 1:
        parser.error(f"--phase-seconds must be at least {WINDOW_S + 1:g}")
    return args


def fetch_counters(url: str) -> dict[str, Any]:
    try:
        response = httpx2.get(f"{url}/healthz", timeout=10.0, trust_env=False)
        counters: dict[str, Any] = response.json().get("counters") or {}
        return counters
    except (httpx2.HTTPError, ValueError):
        return {}


def measure(
    workdir: Path, args: argparse.Namespace
) -> tuple[list[Phase], list[Sample], list[Probe], int, float, dict[str, Any]]:
    with running_stack(workdir, args.gc_log, args.gc_freeze) as stack:
        scorer_limit = stack.settings.concurrency.scorer
        if scorer_limit is None:
            raise RuntimeError("concurrency.scorer must be set to compute the capacity")
        total = stack.settings.concurrency.total
        limit = scorer_limit if total is None else min(total, scorer_limit)
        capacity = limit / (JUDGE_LATENCY_MS / 1000.0)
        print(
            f"judge capacity: concurrency.scorer {limit} / {JUDGE_LATENCY_MS:g} ms = "
            f"{capacity:g} rollouts/s; max_pending "
            f"{stack.settings.scoring.max_pending}",
            flush=True,
        )
        profiler = start_profiler(stack.amaris.pid, args.py_spy)
        try:
            phases, samples, unanswered = asyncio.run(
                run_load(stack, capacity, args.phase_seconds, args.http_client)
            )
        finally:
            stop_profiler(profiler)
        time.sleep(0.5)
        probes = read_probes(stack.probe_log)
        counters = fetch_counters(stack.amaris_url)
        for child in (stack.amaris, stack.llm):
            if not child.alive():
                print(f"--- {child.name} died:\n{child.log_tail(40)}", file=sys.stderr)
    if args.keep is not None:
        dump(workdir, phases, samples, probes)
    return phases, samples, probes, unanswered, capacity, counters


def start_profiler(pid: int, out: Path | None) -> subprocess.Popen[bytes] | None:
    """``py-spy record`` of amaris (``pid``; with native frames, e.g. the GC) into ``out``."""
    if out is None:
        return None
    exe = require_py_spy(out)
    print(
        f"  py-spy started at monotonic {time.monotonic():.3f}, log {out.with_suffix('.log')}",
        flush=True,
    )
    # Native frames (the GC, C extensions) need the blocking mode: py-spy pauses amaris
    # for each sample, which perturbs it slightly.
    argv = [
        exe,
        "record",
        "--pid",
        str(pid),
        "--threads",
        "--native",
        "--rate",
        "100",
        "--format",
        PY_SPY_FORMATS.get(out.suffix, "raw"),
        "--output",
        str(out),
    ]
    with out.with_suffix(".log").open("wb") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def dump(folder: Path, phases: list[Phase], samples: list[Sample], probes: list[Probe]) -> None:
    """Every request, probe and phase boundary (monotonic times), for later analysis."""
    with (folder / "samples.jsonl").open("w", encoding="utf-8") as out:
        for sample in samples:
            out.write(json.dumps(asdict(sample)) + "\n")
    with (folder / "probes.jsonl").open("w", encoding="utf-8") as out:
        for probe in probes:
            out.write(json.dumps(asdict(probe)) + "\n")
    (folder / "phases.json").write_text(
        json.dumps([asdict(p) for p in phases], indent=1), encoding="utf-8"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe:
        return probe_main(args.probe)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started = datetime.now(UTC)
    LOADAVG["start"] = loadavg()
    try:
        with work_folder("amaris-overload-", args.keep) as workdir:
            measured = measure(workdir, args)
    except KeyboardInterrupt:
        print("interrupted; servers stopped, nothing written", file=sys.stderr)
        return 130
    LOADAVG["end"] = loadavg()
    phases, samples, probes, unanswered, capacity, counters = measured
    stats = [phase_stats(p, samples, probes) for p in phases]
    verdicts = judge(stats, samples, unanswered)
    print()
    print(timeline(phases, samples, probes))
    print()
    print(results_table(stats, capacity))
    print()
    phase_c = next(p for p in phases if p.name == "c")
    print(recovery_table(phase_c, samples, verdicts.threshold_ms))
    print()
    print(counters_text(counters, stats))
    print()
    print(verdict_lines(verdicts))
    print(gc_text(args, stats, probes))
    text = section(stats, verdicts, capacity, args, started)
    if args.out is None:
        print(text)
    else:
        write_doc(args.out, text, MARK_START, MARK_END)
        print(f"\nwritten to {args.out}")
    return 0 if verdicts.responsive and verdicts.recovers else 1


if __name__ == "__main__":
    sys.exit(main())
