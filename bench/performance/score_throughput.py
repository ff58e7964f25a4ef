"""Throughput and latency of ``POST /score`` against calling the judge directly.

Starts two processes it owns, both bound to 127.0.0.1 on free ports:

* ``amaris offline-llm --latency-ms L``: the rule-based judge behind an
  OpenAI-compatible API, sleeping ``L`` ms per request (a stand-in for a real LLM);
* ``amaris serve`` with a temporary configuration pointing its judge at that server,
  the score cache off (``scoring.cache_size: 0``) so every request reaches the judge.

For each judge latency and each client count it runs a closed-loop load (N asyncio
workers sharing one ``AsyncClient``) in two modes:

* ``direct``: the exact chat-completion request the amaris scorer sends, straight to
  the offline LLM's ``/v1/chat/completions``;
* ``amaris``: ``POST /score`` with a unique rollout per request.

The gap between the two is what amaris adds. Results are printed and written between
the ``score_throughput`` markers of ``docs/benchmarks.md``.

The client is ``httpx2.AsyncClient`` by default (the httpx fork the ``openai`` SDK, and so
amaris, uses; it is in the venv as an ``openai`` dependency). ``--http-client httpx``
selects ``httpx.AsyncClient`` (httpx 0.28 / httpcore 1.0), whose connection pool does
O(connections^2) work per request (``_assign_requests_to_connections``), which makes the
load generator, not the servers, the bottleneck at 64 clients.

Targets, at 64 clients and a 200 ms judge: ``/score`` throughput at least 90% of direct,
p50 added latency at most 5 ms.

Usage::

    .venv/bin/python -m bench.performance.score_throughput [--duration S] [--clients 1,16,64]
        [--latencies 0,200] [--out docs/benchmarks.md] [--http-client httpx2|httpx]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import yaml

from amaris.agents.prompts import load_prompts
from amaris.app.running import free_port
from amaris.llm.output_mode import response_format
from amaris.llm.providers import chat_body
from amaris.rubric.model import RubricVersion, adaptive_from_config, anchors_from_config
from amaris.scoring.judge_protocol import JudgeVerdicts, judge_messages, verdicts_schema
from amaris.settings import Settings, load_settings
from bench._common import (
    API_KEY,
    QUESTION,
    REFERENCE,
    ROOT,
    Child,
    ClientLike,
    amaris_executable,
    child_env,
    cpu_seconds,
    doc_section,
    fmt,
    loadavg,
    markers,
    open_client,
    percentile,
    raise_interrupt,
    settle,
    start_offline_llm,
    wait_servers_ready,
    write_doc,
)

MARK_START, MARK_END = markers("score_throughput")
DOC_INTRO = (
    "# Benchmarks\n"
    "Figures measured on this machine (2 cores), with the command that produced them.\n"
)
LOADAVG: dict[str, str] = {"start": "-", "end": "-"}
# Targets, checked at TARGET_CLIENTS clients and TARGET_LATENCY_MS judge latency.
TARGET_CLIENTS = 64
TARGET_LATENCY_MS = 200.0
TARGET_THROUGHPUT_RATIO = 0.90
TARGET_ADDED_P50_MS = 5.0
REQUEST_TIMEOUT_S = 120.0

HTTP_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, httpx2.HTTPError, ValueError)

Send = Callable[[ClientLike, int], Awaitable[str | None]]
"""Sends request number ``n``; returns None on success, else a description of the error."""


# -- rollouts and requests ------------------------------------------------------------
def rollout_fields(n: int) -> dict[str, str]:
    """Rollout ``n``: its output is unique, so no cache or in-flight merge can answer it."""
    output = (
        f"Each pencil costs 45 / 3 = 15 cents, so 7 pencils cost 7 * 15 = 105 cents. "
        f"Final answer: 105. [bench sample {n}]"
    )
    return {"input": QUESTION, "output": output, "supplemental_context": REFERENCE}


def scorer_request_body(settings: Settings, prompt: str, fields: dict[str, str]) -> dict[str, Any]:
    """The chat-completion body amaris's scorer sends for ``fields`` (see amaris.scoring.scorer).

    The messages are ``Scorer._judge``'s (:func:`amaris.scoring.scorer.judge_messages` over the
    configured rubric), the options ``OpenAIProvider.complete``'s.
    """
    rubric = RubricVersion(
        version=1,
        origin="config",
        anchors=anchors_from_config(settings.anchor_rubrics),
        adaptive=adaptive_from_config(settings.adaptive_rubrics),
    )
    messages = judge_messages(prompt, rubric, fields)
    # The very functions amaris uses: "direct" sends exactly what amaris sends (the default
    # structured output: the rubric's strict verdict schema).
    schema = verdicts_schema(tuple(c.id for c in rubric.criteria))
    return chat_body(
        messages,
        settings.agents.for_agent("scorer"),
        response_format("json_schema", JudgeVerdicts.__name__, schema),
    )


def direct_sender(llm_url: str, settings: Settings) -> Send:
    """POST the scorer's chat-completion request to the offline LLM."""
    prompt = load_prompts(settings.prompts)["scorer"]
    url = f"{llm_url}/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}"}

    async def send(client: ClientLike, n: int) -> str | None:
        body = scorer_request_body(settings, prompt, rollout_fields(n))
        response = await client.post(url, json=body, headers=headers)
        if response.status_code != 200:
            return f"HTTP {response.status_code}: {response.text[:200]}"
        data = response.json()
        if not data.get("choices"):
            return f"no choices: {response.text[:200]}"
        return None

    return send


def amaris_sender(amaris_url: str) -> Send:
    """POST /score with rollout ``n`` to amaris."""
    url = f"{amaris_url}/score"

    async def send(client: ClientLike, n: int) -> str | None:
        body = {
            "rollout": {"id": f"bench-{n}", **rollout_fields(n)},
            "metadata": {"current_step": 0},
        }
        response = await client.post(url, json=body)
        if response.status_code != 200:
            return f"HTTP {response.status_code}: {response.text[:200]}"
        status = response.json().get("status")
        if status != "scored":
            return f"status {status}: {response.text[:200]}"
        return None

    return send


# -- processes -----------------------------------------------------------------------
@dataclass
class Stack:
    """The offline LLM and amaris for one judge latency."""

    latency_ms: float
    llm: Child
    amaris: Child
    llm_url: str
    amaris_url: str
    settings: Settings


@contextmanager
def running_stack(latency_ms: float, workdir: Path) -> Iterator[Stack]:
    """Start the offline LLM and amaris; stop both on exit, whatever happens."""
    exe = amaris_executable()
    env = child_env()
    run_dir = workdir / f"latency-{latency_ms:g}ms"
    run_dir.mkdir(parents=True, exist_ok=True)
    children: list[Child] = []
    try:
        llm, llm_url = start_offline_llm(exe, latency_ms, run_dir, env)
        children.append(llm)
        config = {
            # The offline judge on 127.0.0.1 stands for a hosted one: no per-endpoint
            # limit (a judge on this machine gets 4 in flight by default).
            "client": {"default": {"base_url": llm_url, "api_key": API_KEY, "max_concurrency": 0}},
            "memory": {"path": str(run_dir / "data")},
            "server": {"host": "127.0.0.1"},
            "logging": {"level": "WARNING"},
            "scoring": {"cache_size": 0},
        }
        config_path = run_dir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        amaris_port = free_port()
        amaris = Child(
            "amaris",
            [exe, "serve", "--config", str(config_path), "--port", str(amaris_port)],
            run_dir / "amaris.log",
            run_dir,
            env,
        )
        children.append(amaris)
        amaris_url = f"http://127.0.0.1:{amaris_port}"
        print(
            f"judge latency {latency_ms:g} ms: started offline-llm (pid {llm.pid}) and amaris "
            f"(pid {amaris.pid}); waiting until they answer and amaris is idle",
            flush=True,
        )
        wait_servers_ready(llm, llm_url, amaris, amaris_url)
        settle(amaris)
        print(f"  ready: offline-llm {llm_url}, amaris {amaris_url}, logs in {run_dir}", flush=True)
        yield Stack(latency_ms, llm, amaris, llm_url, amaris_url, load_settings(config_path))
    finally:
        # amaris first (it holds connections to the LLM), then the LLM.
        for child in reversed(children):
            child.stop()


# -- load --------------------------------------------------------------------------------
@dataclass
class Result:
    """One measurement: one mode at one (judge latency, clients)."""

    mode: str
    latency_ms: float
    clients: int
    duration_s: float
    ok: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    cpu_ms_per_req: dict[str, float | None] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    def pct(self, q: float) -> float:
        """Latency percentile ``q`` (0-100), linear interpolation; NaN with no sample."""
        return percentile(self.latencies_ms, q)


async def run_load(
    stack: Stack,
    mode: str,
    send: Send,
    clients: int,
    warmup_s: float,
    duration_s: float,
    http_client: str,
) -> Result:
    """Closed loop: ``clients`` workers send back to back for warm-up + duration.

    Counted: the requests that complete inside the measurement window (after the
    warm-up); requests still in flight at its end finish but are not counted.
    """
    result = Result(mode, stack.latency_ms, clients, duration_s)
    counter = itertools.count()
    pids: dict[str, int | None] = {"amaris": stack.amaris.pid, "llm": stack.llm.pid, "bench": None}
    async with open_client(http_client, clients + 8, REQUEST_TIMEOUT_S) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        window_start = started + warmup_s
        window_end = window_start + duration_s

        async def worker() -> None:
            while loop.time() < window_end:
                n = next(counter)
                t0 = time.perf_counter()
                try:
                    error = await send(client, n)
                except HTTP_ERRORS as exc:
                    error = f"{type(exc).__name__}: {exc}"
                elapsed_ms = (time.perf_counter() - t0) * 1000.0
                now = loop.time()
                if not window_start <= now <= window_end:
                    continue
                if error is None:
                    result.ok += 1
                    result.latencies_ms.append(elapsed_ms)
                else:
                    result.errors += 1
                    if len(result.error_samples) < 5:
                        result.error_samples.append(error)

        async def cpu_probe() -> None:
            await asyncio.sleep(max(0.0, window_start - loop.time()))
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            await asyncio.sleep(max(0.0, window_end - loop.time()))
            after = {name: cpu_seconds(pid) for name, pid in pids.items()}
            done = result.ok + result.errors
            for name in pids:
                b, a = before[name], after[name]
                result.cpu_ms_per_req[name] = (
                    (a - b) * 1000.0 / done if a is not None and b is not None and done else None
                )

        await asyncio.gather(cpu_probe(), *(worker() for _ in range(clients)))
    return result


async def measure_stack(
    stack: Stack, clients_list: list[int], warmup_s: float, duration_s: float, http_client: str
) -> list[Result]:
    direct = direct_sender(stack.llm_url, stack.settings)
    scored = amaris_sender(stack.amaris_url)
    results: list[Result] = []
    for clients in clients_list:
        for mode, send in (("direct", direct), ("amaris", scored)):
            for child in (stack.llm, stack.amaris):
                if not child.alive():
                    raise RuntimeError(f"{child.name} died:\n{child.log_tail()}")
            result = await run_load(stack, mode, send, clients, warmup_s, duration_s, http_client)
            results.append(result)
            print(f"  {row_text(result)}", flush=True)
            for sample in result.error_samples:
                print(f"    error: {sample}", flush=True)
    return results


# -- report ----------------------------------------------------------------------------
def row_text(r: Result) -> str:
    cpu = r.cpu_ms_per_req
    return (
        f"latency {r.latency_ms:>4g} ms  clients {r.clients:>3}  {r.mode:<6}  "
        f"ok {r.ok:>6}  err {r.errors:>4}  {r.throughput:8.1f} req/s  "
        f"p50 {fmt(r.pct(50)):>7}  p90 {fmt(r.pct(90)):>7}  p99 {fmt(r.pct(99)):>7} ms  "
        f"cpu ms/req amaris {fmt(cpu.get('amaris'), 2)} llm {fmt(cpu.get('llm'), 2)} "
        f"bench {fmt(cpu.get('bench'), 2)}"
    )


@dataclass
class Comparison:
    latency_ms: float
    clients: int
    ratio: float
    added_p50: float
    added_p99: float


def compare(results: list[Result]) -> list[Comparison]:
    by_key = {(r.latency_ms, r.clients, r.mode): r for r in results}
    out: list[Comparison] = []
    for r in results:
        if r.mode != "amaris":
            continue
        d = by_key.get((r.latency_ms, r.clients, "direct"))
        if d is None:
            continue
        ratio = r.throughput / d.throughput if d.throughput > 0 else float("nan")
        out.append(
            Comparison(r.latency_ms, r.clients, ratio, r.pct(50) - d.pct(50), r.pct(99) - d.pct(99))
        )
    return out


def results_table(results: list[Result]) -> str:
    lines = [
        "| judge latency (ms) | clients | mode | requests | errors | req/s "
        "| p50 (ms) | p90 (ms) | p99 (ms) | CPU ms/req amaris | CPU ms/req LLM "
        "| CPU ms/req bench |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        cpu = r.cpu_ms_per_req
        lines.append(
            f"| {r.latency_ms:g} | {r.clients} | {r.mode} | {r.ok} | {r.errors} "
            f"| {r.throughput:.1f} | {fmt(r.pct(50))} | {fmt(r.pct(90))} | {fmt(r.pct(99))} "
            f"| {fmt(cpu.get('amaris'), 2)} | {fmt(cpu.get('llm'), 2)} "
            f"| {fmt(cpu.get('bench'), 2)} |"
        )
    return "\n".join(lines)


def comparison_table(comparisons: list[Comparison]) -> str:
    lines = [
        "| judge latency (ms) | clients | throughput amaris/direct | added p50 (ms) "
        "| added p99 (ms) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for c in comparisons:
        lines.append(
            f"| {c.latency_ms:g} | {c.clients} | {c.ratio * 100:.1f}% "
            f"| {c.added_p50:+.1f} | {c.added_p99:+.1f} |"
        )
    return "\n".join(lines)


def targets(comparisons: list[Comparison]) -> list[tuple[str, str, str]]:
    """(target, measured, PASS/FAIL/NOT MEASURED)."""
    at = next(
        (
            c
            for c in comparisons
            if c.clients == TARGET_CLIENTS and c.latency_ms == TARGET_LATENCY_MS
        ),
        None,
    )
    thr = f"/score throughput >= {TARGET_THROUGHPUT_RATIO:.0%} of direct"
    p50 = f"p50 added latency <= {TARGET_ADDED_P50_MS:g} ms"
    if at is None:
        return [(thr, "-", "NOT MEASURED"), (p50, "-", "NOT MEASURED")]
    return [
        (thr, f"{at.ratio:.1%}", "PASS" if at.ratio >= TARGET_THROUGHPUT_RATIO else "FAIL"),
        (p50, f"{at.added_p50:+.1f} ms", "PASS" if at.added_p50 <= TARGET_ADDED_P50_MS else "FAIL"),
    ]


def doc_table(results: list[Result]) -> str:
    """One row per judge latency and client count: both modes side by side."""
    by_key = {(r.latency_ms, r.clients, r.mode): r for r in results}
    lines = [
        "| judge latency (ms) | clients | req/s direct / amaris | amaris/direct "
        "| p50 direct / amaris (ms) | p99 direct / amaris (ms) | amaris CPU ms/req | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in compare(results):
        d = by_key[(c.latency_ms, c.clients, "direct")]
        a = by_key[(c.latency_ms, c.clients, "amaris")]
        lines.append(
            f"| {c.latency_ms:g} | {c.clients} | {d.throughput:.1f} / {a.throughput:.1f} "
            f"| {c.ratio:.1%} | {fmt(d.pct(50))} / {fmt(a.pct(50))} "
            f"| {fmt(d.pct(99))} / {fmt(a.pct(99))} "
            f"| {fmt(a.cpu_ms_per_req.get('amaris'), 2)} | {d.errors + a.errors} |"
        )
    return "\n".join(lines)


def section(results: list[Result], args: argparse.Namespace, started: datetime) -> str:
    return doc_section(
        "score_throughput",
        "`/score` throughput and latency vs. direct judge calls",
        f"Closed-loop clients send `POST /score` to `amaris serve` (score cache off) and, "
        f"for comparison, the same judge request straight to `amaris offline-llm`; "
        f"{args.duration:g} s per point, all processes on this machine.",
        doc_table(results),
        script=__file__,
        when=started,
        load=f"{LOADAVG['start']} -> {LOADAVG['end']}",
        targets=[
            (f"{name} at {TARGET_CLIENTS} clients, {TARGET_LATENCY_MS:g} ms", measured, verdict)
            for name, measured, verdict in targets(compare(results))
        ],
    )


# -- main ----------------------------------------------------------------------------------
def _numbers(text: str, kind: type[int] | type[float]) -> list[Any]:
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative numbers, got {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration",
        type=float,
        default=10.0,
        help="measured seconds per (latency, clients, mode) (default 10)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=1.0,
        help="warm-up seconds before each measurement (default 1)",
    )
    parser.add_argument(
        "--clients",
        type=lambda s: _numbers(s, int),
        default=[1, 16, 64],
        help="concurrent clients, comma-separated (default 1,16,64)",
    )
    parser.add_argument(
        "--latencies",
        type=lambda s: _numbers(s, float),
        default=[0.0, 200.0],
        help="judge latencies in ms, comma-separated (default 0,200)",
    )
    parser.add_argument(
        "--http-client",
        choices=["httpx2", "httpx"],
        default="httpx2",
        help="load generator's client library (default httpx2, see above)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "benchmarks.md",
        help="markdown file to update (default docs/benchmarks.md)",
    )
    args = parser.parse_args(argv)
    if args.duration <= 0 or any(c < 1 for c in args.clients):
        parser.error("--duration must be > 0 and every client count >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started = datetime.now(UTC)
    LOADAVG["start"] = loadavg()
    results: list[Result] = []
    try:
        with tempfile.TemporaryDirectory(prefix="amaris-bench-") as tmp:
            for latency_ms in args.latencies:
                with running_stack(latency_ms, Path(tmp)) as stack:
                    measured = asyncio.run(
                        measure_stack(
                            stack, args.clients, args.warmup, args.duration, args.http_client
                        )
                    )
                    results += measured
                    if any(r.errors for r in measured):
                        # The temporary folder goes away: show the servers' side now.
                        for child in (stack.amaris, stack.llm):
                            print(
                                f"--- end of the {child.name} log:\n{child.log_tail(40)}",
                                file=sys.stderr,
                            )
    except KeyboardInterrupt:
        print("interrupted; servers stopped, nothing written", file=sys.stderr)
        return 130
    LOADAVG["end"] = loadavg()
    print()
    print(results_table(results))
    print()
    print(comparison_table(compare(results)))
    print()
    for name, value, verdict in targets(compare(results)):
        print(f"{verdict:<12} {name}: {value}")
    out: Path = args.out
    write_doc(out, section(results, args, started), MARK_START, MARK_END, DOC_INTRO)
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
