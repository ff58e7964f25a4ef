"""Judge throughput against an endpoint's rate limit: how close amaris gets to it, and
whether it draws any 429.

Starts two processes it owns, bound to 127.0.0.1 on free ports, and stops them by PID at
the end (also on error or Ctrl-C), once per scenario:

* ``amaris offline-llm --latency-ms L --requests-per-minute R --tokens-per-minute T
  --rate-burst-seconds 2``: the rule-based judge behind an OpenAI-compatible API that
  enforces its limits as a hosted API does (a 429 with ``retry-after`` past them, the
  ``x-ratelimit-*`` headers on every answer), over 2 s of each limit at most at once;
* ``amaris serve`` judging through it with the same limits
  (``client.default.requests_per_minute`` / ``tokens_per_minute``), the score cache off,
  the hashing embedder, no step completing by itself.

A trainer (this process) keeps ``--clients`` ``POST /score`` calls in flight, each with a
unique rollout, for ``--duration`` seconds: more than the limit lets through, so amaris's
limiter is what paces the judge. Two scenarios: ``requests`` (a limit of requests a minute
binds) and ``tokens`` (a limit of tokens a minute binds; amaris takes each call's prompt
estimate plus ``max_tokens`` and settles it with the usage the judge reports). After
``--warmup`` seconds (the buckets' first burst) the judge calls answered and their tokens
are read from amaris's ``/metrics`` at the start and the end of the window; the 429s from
amaris's call log (``llm_calls.jsonl``).

Reported per scenario: the limit, the throughput measured (calls or tokens a minute), its
ratio to the limit, the 429s, and the seconds calls waited for the limit. Target: the
throughput within 5% of the limit, and no 429. Results are printed and written between
the ``rate_limit`` markers of ``--out``.

Usage::

    .venv/bin/python -m bench.performance.rate_limit [--duration 60] [--warmup 5]
        [--clients 32] [--latency-ms 200] [--keep DIR] [--out docs/benchmarks.md] [--smoke]

``--smoke``: 2 s per scenario after 1 s of warm-up, 8 clients, a 0 ms judge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import yaml
from prometheus_client.parser import text_string_to_metric_families

from amaris.app.running import free_port
from bench._common import (
    API_KEY,
    QUESTION,
    REFERENCE,
    Child,
    amaris_executable,
    child_env,
    doc_section,
    loadavg,
    markers,
    raise_interrupt,
    report_path,
    wait_servers_ready,
    work_folder,
    write_doc,
)

MARK_START, MARK_END = markers("rate_limit")
TARGET_RATIO = 0.05
"""Throughput within this share of the limit, either side."""
JUDGE_BURST_SECONDS = 2.0
"""Seconds of each limit the judge lets through at once."""
SMOKE = {"duration": 2.0, "warmup": 1.0, "clients": 8, "latency_ms": 0.0}


@dataclass(frozen=True)
class Scenario:
    """One limit that binds: its kind and value a minute, and the other one's."""

    kind: str
    requests_per_minute: int | None
    tokens_per_minute: int | None

    @property
    def limit(self) -> int:
        value = self.requests_per_minute if self.kind == "requests" else self.tokens_per_minute
        assert value is not None
        return value


SCENARIOS = (
    Scenario("requests", 600, None),
    Scenario("tokens", None, 120_000),
)


@dataclass
class Figures:
    """One scenario's measurement."""

    scenario: Scenario
    seconds: float
    calls: int
    tokens: int
    refused: int
    waited: float
    failed: int

    @property
    def per_minute(self) -> float:
        done = self.calls if self.scenario.kind == "requests" else self.tokens
        return done / self.seconds * 60

    @property
    def ratio(self) -> float:
        return self.per_minute / self.scenario.limit

    @property
    def passed(self) -> bool:
        return abs(self.ratio - 1) <= TARGET_RATIO and self.refused == 0


# -- processes --------------------------------------------------------------------------
@contextmanager
def running(scenario: Scenario, latency_ms: float, workdir: Path) -> Iterator[tuple[str, Path]]:
    """The limited judge and amaris judging through it: (amaris's URL, its call log)."""
    exe, env = amaris_executable(), child_env()
    folder = workdir / scenario.kind
    folder.mkdir(parents=True, exist_ok=True)
    limits = {
        "requests_per_minute": scenario.requests_per_minute,
        "tokens_per_minute": scenario.tokens_per_minute,
    }
    llm_port, port = free_port(), free_port()
    argv = [exe, "offline-llm", "--port", str(llm_port), "--latency-ms", f"{latency_ms:g}"]
    argv += ["--rate-burst-seconds", f"{JUDGE_BURST_SECONDS:g}"]
    for key, value in limits.items():
        if value is not None:
            argv += [f"--{key.replace('_', '-')}", str(value)]
    llm_url = f"http://127.0.0.1:{llm_port}/v1"
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port},
        "client": {
            "default": {"base_url": llm_url, "api_key": API_KEY, "max_concurrency": 0, **limits}
        },
        "agents": {"default": {"max_tokens": 256}},
        "memory": {"path": str(folder / "data"), "embedding_model": "hashing"},
        "logging": {"level": "WARNING"},
        "scoring": {"cache_size": 0, "timeout_seconds": None},
        "pipeline": {"rollouts_per_step": None},
        "prefect": {"repair_interval_seconds": None},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    children: list[Child] = []
    try:
        children.append(Child("offline-llm", argv, folder / "offline-llm.log", folder, env))
        amaris_argv = [exe, "serve", "--config", str(path)]
        children.append(Child("amaris", amaris_argv, folder / "amaris.log", folder, env))
        url = f"http://127.0.0.1:{port}"
        wait_servers_ready(children[0], llm_url, children[1], url)
        print(f"{scenario.kind}: judge {llm_url}, amaris {url}, files in {folder}", flush=True)
        yield url, folder / "data" / "logs" / "llm_calls.jsonl"
    finally:
        for child in reversed(children):
            child.stop()


# -- load and figures -------------------------------------------------------------------
def scorer_totals(text: str) -> tuple[int, int, float]:
    """The scorer's judge calls answered, their tokens, and its rate-limit wait (s)."""
    calls = tokens = 0
    waited = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("agent") != "scorer":
                continue
            if sample.name == "amaris_llm_model_calls_total":
                calls += int(sample.value)
            elif sample.name == "amaris_llm_tokens_total" and sample.labels["kind"] in (
                "prompt",
                "completion",
            ):
                tokens += int(sample.value)
            elif sample.name == "amaris_llm_rate_limit_wait_seconds_total":
                waited += sample.value
    return calls, tokens, waited


def refusals(call_log: Path) -> int:
    """Requests the judge refused with a 429, from amaris's call log."""
    if not call_log.is_file():
        return 0
    lines = call_log.read_text(encoding="utf-8").splitlines()
    return sum("RateLimitError" in (json.loads(line).get("error") or "") for line in lines)


async def measure(
    scenario: Scenario, url: str, call_log: Path, args: argparse.Namespace
) -> Figures:
    """Keep ``args.clients`` ``/score`` calls in flight; the window's figures."""
    failed = 0
    stop = time.monotonic() + args.warmup + args.duration
    counter = iter(range(10**9))
    limits = httpx2.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx2.AsyncClient(limits=limits, timeout=600.0, trust_env=False) as client:

        async def worker() -> None:
            nonlocal failed
            while time.monotonic() < stop:
                n = next(counter)
                output = f"7 pencils cost 7 * 15 = 105 cents. Final answer: 105. [sample {n}]"
                rollout = {"id": f"rl-{n}", "input": QUESTION, "output": output}
                body = {
                    "rollout": {**rollout, "supplemental_context": REFERENCE},
                    "metadata": {"current_step": 0},
                }
                response = await client.post(f"{url}/score", json=body)
                if response.status_code != 200 or response.json().get("status") != "scored":
                    failed += 1

        async def window() -> tuple[float, tuple[int, int, float], tuple[int, int, float]]:
            await asyncio.sleep(args.warmup)
            started = time.monotonic()
            first = scorer_totals((await client.get(f"{url}/metrics")).text)
            await asyncio.sleep(max(0.0, stop - time.monotonic()))
            last = scorer_totals((await client.get(f"{url}/metrics")).text)
            return time.monotonic() - started, first, last

        workers = [asyncio.ensure_future(worker()) for _ in range(args.clients)]
        seconds, first, last = await window()
        await asyncio.gather(*workers)
    return Figures(
        scenario,
        seconds,
        calls=last[0] - first[0],
        tokens=last[1] - first[1],
        refused=refusals(call_log),
        waited=last[2] - first[2],
        failed=failed,
    )


def table(results: list[Figures]) -> str:
    rows = [
        "| limit that binds | limit a minute | measured a minute | of the limit | judge calls "
        "| 429s | seconds waited for the limit |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r.scenario.kind} | {r.scenario.limit:,} | {r.per_minute:,.0f} | "
            f"{r.ratio:.1%} | {r.calls} | {r.refused} | {r.waited:.0f} |"
        )
    return "\n".join(rows)


def section(results: list[Figures], args: argparse.Namespace, started: datetime, load: str) -> str:
    what = (
        f"`/score` kept {args.clients} calls deep for {args.duration:g} s (after "
        f"{args.warmup:g} s) through a {args.latency_ms:g} ms judge that enforces its limit "
        f"(`amaris offline-llm --requests-per-minute/--tokens-per-minute`, "
        f"{JUDGE_BURST_SECONDS:g} s of it at once, 429 past it), amaris configured with the "
        "same limit. Measured: judge calls (or their tokens) answered a minute."
    )
    verdicts = [
        (
            f"{r.scenario.kind} a minute within {TARGET_RATIO:.0%} of the limit, no 429",
            f"{r.ratio:.1%} of it, {r.refused} 429s",
            "PASS" if r.passed else "FAIL",
        )
        for r in results
    ]
    return doc_section(
        "rate_limit",
        "Rate limits: judge throughput against the endpoint's limit",
        what,
        table(results),
        script=__file__,
        when=started,
        load=load,
        targets=verdicts,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before the window")
    parser.add_argument("--clients", type=int, default=32, help="/score calls in flight")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="judge latency")
    parser.add_argument("--keep", type=Path, help="keep the servers' files in this folder")
    parser.add_argument(
        "--out",
        type=Path,
        help="markdown file to update (default docs/benchmarks.md; with --smoke, none)",
    )
    parser.add_argument("--smoke", action="store_true", help="2 s a scenario, a 0 ms judge")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    args.out = report_path(args.out, args.smoke)
    if args.duration <= 0 or args.warmup < 0 or args.clients < 1 or args.latency_ms < 0:
        parser.error("--duration > 0, --warmup >= 0, --clients >= 1, --latency-ms >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started, load = datetime.now(UTC), loadavg()
    results: list[Figures] = []
    try:
        with work_folder("amaris-rate-limit-bench-", args.keep) as workdir:
            for scenario in SCENARIOS:
                with running(scenario, args.latency_ms, workdir) as (url, call_log):
                    figures = asyncio.run(measure(scenario, url, call_log, args))
                results.append(figures)
                print(
                    f"{scenario.kind}: {figures.per_minute:,.0f} a minute "
                    f"({figures.ratio:.1%} of {scenario.limit:,}), {figures.calls} calls, "
                    f"{figures.refused} 429s, {figures.failed} failed /score",
                    flush=True,
                )
    except KeyboardInterrupt:
        print("interrupted; servers stopped, nothing written", file=sys.stderr)
        return 130
    text = section(results, args, started, load)
    if args.out is None:
        print(text)
        return 0
    write_doc(args.out, text, MARK_START, MARK_END)
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
