"""Slow request heads against ``amaris serve``: do ``/score`` and ``/healthz`` still answer?

Starts ``amaris serve`` (offline judge, ``hashing`` embedder, ``server.api_key`` set, data
in a temporary folder) on a free port of 127.0.0.1, waits until it is idle, then, while
probing every 0.25 s an authenticated ``POST /score`` on a new connection, one on a
kept-alive connection, and ``GET /healthz`` on a new connection (each with a 10 s client
timeout):

1. **Before**: ``--before`` seconds without attack.
2. **During**: ``--connections`` attackers, unauthenticated, each opening a connection
   (spread over the first 2 s) and sending a request line, then one header line every
   ``--interval`` seconds, a head that never ends; when the server closes one, the
   attacker opens another at once. For ``--hold`` seconds.
3. **After**: ``--after`` seconds once every attacker has stopped.

Reports per phase and probe the answers (status or client error) and the latency (median,
p95, max), and what the server did with the attackers' connections.

Stops the server by PID at the end (also on error or Ctrl-C).

Usage::

    .venv/bin/python -m bench.probes.slow_heads [--connections 1100] [--interval 2]
        [--hold 30] [--before 5] [--after 5] [--smoke]

Prints its figures; ``docs/benchmarks.md`` quotes them with this command. ``--smoke``: 4
attackers for 3 s, short phases around it, and ``server.head_timeout_seconds`` at
:data:`SMOKE_HEAD_TIMEOUT_S` so that they are cut off and come back.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import resource
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from bench._common import (
    API_KEY,
    fmt,
    keyed_serve,
    loadavg,
    machine,
    percentile,
    raise_interrupt,
    work_folder,
)

PROBE_EVERY_S = 0.25
PROBE_TIMEOUT_S = 10.0
RAMP_S = 2.0
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SMOKE = {"connections": 4, "interval": 0.5, "hold": 3.0, "before": 0.5, "after": 0.5}
SMOKE_HEAD_TIMEOUT_S = 1.0
_ids = itertools.count()


@dataclass
class Attack:
    """What the server did with the attackers' connections."""

    opened: int = 0
    connect_errors: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    lifetimes: list[float] = field(default_factory=list)
    """Seconds from open to the server's answer or close."""


@dataclass
class Probes:
    """Latency (s) and answer of every probe, by phase and probe."""

    phase: str = "before"
    latency: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    answers: dict[tuple[str, str], Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter)
    )


def score_body() -> dict[str, object]:
    return {
        "rollout": {
            "id": f"probe-{next(_ids)}",
            "input": "What is 2+2?",
            "output": "4",
            "supplemental_context": "4",
        },
        "metadata": {"current_step": 0},
    }


async def attacker(
    port: int, attack: Attack, start_after: float, until: float, interval: float
) -> None:
    """Slow heads, one after the other, until ``until`` (monotonic)."""
    await asyncio.sleep(start_after)
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            attack.connect_errors += 1
            await asyncio.sleep(0.1)
            continue
        attack.opened += 1
        opened = time.monotonic()
        first_line = asyncio.create_task(reader.readline())
        writer.write(b"GET /rubrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for index in itertools.count():
            remaining = until - time.monotonic()
            if remaining <= 0:
                break
            done, _ = await asyncio.wait({first_line}, timeout=min(interval, remaining))
            if done:
                break
            writer.write(b"X-Slow-%d: 1\r\n" % index)
        if first_line.done():
            try:
                line = first_line.result()
                outcome = f"answered {line.split()[1].decode()}" if line else "closed unanswered"
            except (ConnectionError, OSError, IndexError):
                outcome = "closed unanswered"
            attack.lifetimes.append(time.monotonic() - opened)
        else:
            first_line.cancel()
            outcome = "still open at the end"
        attack.outcomes[outcome] += 1
        writer.close()


async def probe(name: str, probes: Probes, call: Callable[[], Awaitable[httpx.Response]]) -> None:
    """Every ``PROBE_EVERY_S`` until cancelled: time ``call()`` and record its answer."""
    while True:
        phase = probes.phase
        started = time.monotonic()
        try:
            response = await call()
            answer = str(response.status_code)
        except httpx.HTTPError as exc:
            answer = type(exc).__name__
        elapsed = time.monotonic() - started
        probes.latency[(phase, name)].append(elapsed)
        probes.answers[(phase, name)][answer] += 1
        await asyncio.sleep(max(0.0, PROBE_EVERY_S - elapsed))


async def measure(port: int, args: argparse.Namespace) -> tuple[Probes, Attack]:
    url = f"http://127.0.0.1:{port}"
    probes = Probes()
    attack = Attack()
    fresh = httpx.Limits(max_keepalive_connections=0)
    timeout = httpx.Timeout(PROBE_TIMEOUT_S)
    async with (
        httpx.AsyncClient(base_url=url, headers=AUTH, limits=fresh, timeout=timeout) as new,
        httpx.AsyncClient(base_url=url, headers=AUTH, timeout=timeout) as kept,
    ):
        calls: dict[str, Callable[[], Awaitable[httpx.Response]]] = {
            "/score, new connection": lambda: new.post("/score", json=score_body()),
            "/score, kept-alive": lambda: kept.post("/score", json=score_body()),
            "/healthz, new connection": lambda: new.get("/healthz"),
        }
        tasks = [asyncio.create_task(probe(name, probes, call)) for name, call in calls.items()]
        await asyncio.sleep(args.before)
        probes.phase = "during"
        print(f"attack: {args.connections} slow heads for {args.hold:g} s", flush=True)
        until = time.monotonic() + args.hold
        await asyncio.gather(
            *(
                attacker(port, attack, RAMP_S * i / args.connections, until, args.interval)
                for i in range(args.connections)
            )
        )
        probes.phase = "after"
        await asyncio.sleep(args.after)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return probes, attack


def report(probes: Probes, attack: Attack) -> None:
    print("phase   | probe                      | answers                  | median | p95    | max")
    for (phase, name), values in probes.latency.items():
        answers = ", ".join(f"{n}x {a}" for a, n in sorted(probes.answers[(phase, name)].items()))
        print(
            f"{phase:7} | {name:26} | {answers:24} | {fmt(percentile(values, 50) * 1000, 0):>4} ms"
            f" | {fmt(percentile(values, 95) * 1000, 0):>4} ms | {fmt(max(values) * 1000, 0):>4} ms"
        )
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(attack.outcomes.items()))
    life = sorted(attack.lifetimes)
    held = (
        f"; held {fmt(percentile(life, 50), 1)} s median, {fmt(life[-1], 1)} s max" if life else ""
    )
    print(
        f"attackers: {attack.opened} connections opened ({attack.connect_errors} connect "
        f"errors): {outcomes}{held}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument("--before", type=float, default=5.0)
    parser.add_argument("--after", type=float, default=5.0)
    parser.add_argument("--smoke", action="store_true", help="4 attackers for 3 s, 1 s heads")
    args = parser.parse_args(argv)
    server = {"head_timeout_seconds": SMOKE_HEAD_TIMEOUT_S} if args.smoke else None
    if args.smoke:
        vars(args).update(SMOKE)
    signal.signal(signal.SIGTERM, raise_interrupt)
    # Room for the attackers' sockets, here and in the server (it inherits the limit).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.connections)), hard))
    print(f"{machine()}; load average at start {loadavg()}", flush=True)
    with work_folder("amaris-slow-heads-", None) as workdir:
        try:
            with keyed_serve(workdir, server) as (_, port):
                probes, attack = asyncio.run(measure(port, args))
                report(probes, attack)
        except KeyboardInterrupt:
            print("interrupted; server stopped", file=sys.stderr)
            return 130
    print(f"load average at end {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
