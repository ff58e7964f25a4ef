"""Slow and unauthenticated request bodies against ``amaris serve``: memory and cut-off.

Starts ``amaris serve`` (offline judge, ``hashing`` embedder, ``server.api_key`` set, data
in a temporary folder) on a free port of 127.0.0.1, waits until it is idle, then:

1. **Slow bodies.** Opens ``--connections`` raw connections, unauthenticated, each sending
   the headers of a ``POST --path`` with a ``--body-bytes`` JSON body, then all of that body
   but its last byte as fast as the server takes it, then one byte a second: bodies that
   never finish. For ``--hold`` seconds, samples the server process's RSS (``VmRSS`` of
   ``/proc/<pid>/status``) every 0.25 s. Reports RSS before, the peak and at the end, and
   how the server treated the connections (answered with which status, closed, still open).
2. **Trickle.** One connection *with* the key posts to ``/score`` declaring a 10,000-byte
   body and sends it one byte a second; reports the time until the server cuts it off
   (answers or closes), or that it did not within ``--trickle-max`` seconds.

Stops the server by PID at the end (also on error or Ctrl-C).

Usage::

    .venv/bin/python -m bench.probes.slow_bodies [--connections 50] [--body-bytes 3900000]
        [--path /nowhere] [--hold 15] [--trickle-max 90] [--smoke]

Prints its figures; ``docs/benchmarks.md`` quotes them with this command. ``--smoke``: 2
connections of 200 KB held 2 s, and ``server.body_timeout_seconds`` at
:data:`SMOKE_BODY_TIMEOUT_S` for the trickle.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import (
    API_KEY,
    keyed_serve,
    loadavg,
    machine,
    raise_interrupt,
    work_folder,
)

CHUNK = 64 * 1024
STALL_S = 5.0
"""A write that the server does not take within this long ends the fast part of a body."""
SMOKE = {"connections": 2, "body_bytes": 200_000, "hold": 2.0, "trickle_max": 20.0}
SMOKE_BODY_TIMEOUT_S = 2.0


def rss_mb(pid: int) -> float:
    """The resident set size of process ``pid`` in MB (``VmRSS``), NaN if unreadable."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return float("nan")
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def head(method: str, path: str, length: int, authorization: str | None) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {length}",
    ]
    if authorization:
        lines.append(f"Authorization: {authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass
class Outcome:
    """What the server did with one connection."""

    status: int | None = None
    """The status of the answer the server sent, if any."""
    closed: bool = False
    """The server closed the connection (EOF or reset)."""
    cut_after_s: float | None = None
    """Seconds from the request's headers to the answer or the close."""
    sent: int = 0
    """Body bytes the server took."""


async def watch(reader: asyncio.StreamReader, outcome: Outcome, started: float) -> None:
    """Record the first answer's status and the close of the connection."""
    try:
        line = await reader.readline()
        if line.startswith(b"HTTP/"):
            outcome.status = int(line.split()[1])
            outcome.cut_after_s = time.monotonic() - started
        while await reader.read(CHUNK):
            pass
    except (ConnectionError, OSError):
        pass
    outcome.closed = True
    if outcome.cut_after_s is None:
        outcome.cut_after_s = time.monotonic() - started


async def slow_body(
    port: int, path: str, size: int, authorization: str | None, fast: bool, until: float
) -> Outcome:
    """One request whose body never completes before ``until`` (monotonic): with ``fast``,
    all but its last byte at once, then one byte a second."""
    outcome = Outcome()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    watcher = asyncio.create_task(watch(reader, outcome, started))
    try:
        writer.write(head("POST", path, size, authorization))
        await writer.drain()
        if fast:
            while outcome.sent < size - 1 and not outcome.closed:
                piece = min(CHUNK, size - 1 - outcome.sent)
                writer.write(b" " * piece)
                await asyncio.wait_for(writer.drain(), STALL_S)
                outcome.sent += piece
        while time.monotonic() < until and not outcome.closed and outcome.sent < size - 1:
            writer.write(b" ")
            await writer.drain()
            outcome.sent += 1
            await asyncio.sleep(1.0)
    except (ConnectionError, OSError, TimeoutError):
        pass
    while time.monotonic() < until and not outcome.closed:
        await asyncio.sleep(0.1)
    watcher.cancel()
    writer.close()
    return outcome


async def sample_rss(pid: int, until: float, samples: list[float]) -> None:
    while time.monotonic() < until:
        samples.append(rss_mb(pid))
        await asyncio.sleep(0.25)


def describe(outcomes: list[Outcome]) -> str:
    kinds = Counter(
        f"answered {o.status}"
        if o.status is not None
        else "closed unanswered"
        if o.closed
        else "still open"
        for o in outcomes
    )
    cut = sorted(o.cut_after_s for o in outcomes if o.cut_after_s is not None and o.closed)
    took = sum(o.sent for o in outcomes) / 1e6
    where = f"; closed after {cut[0]:.1f}-{cut[-1]:.1f} s" if cut else ""
    return (
        ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + f"; {took:.1f} MB of body sent{where}"
    )


async def measure(port: int, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    before = rss_mb(pid)
    until = time.monotonic() + args.hold
    samples: list[float] = []
    sampler = asyncio.create_task(sample_rss(pid, until, samples))
    outcomes = await asyncio.gather(
        *(
            slow_body(port, args.path, args.body_bytes, None, True, until)
            for _ in range(args.connections)
        )
    )
    await sampler
    after = samples[-1]  # the last sample before the connections close
    print(
        f"slow bodies: RSS before {before:.0f} MB, peak {max(samples):.0f} MB, "
        f"at {args.hold:g} s {after:.0f} MB; {describe(outcomes)}",
        flush=True,
    )
    trickle = await slow_body(
        port, "/score", 10_000, f"Bearer {API_KEY}", False, time.monotonic() + args.trickle_max
    )
    if trickle.closed or trickle.status is not None:
        cut = (
            f"cut off after {trickle.cut_after_s:.1f} s (status {trickle.status}, "
            f"{trickle.sent} bytes sent)"
        )
    else:
        cut = f"not cut off within {args.trickle_max:g} s ({trickle.sent} bytes sent)"
    print(f"trickle (1 byte/s to /score with the key): {cut}", flush=True)
    return {"before": before, "peak": max(samples), "after": after, "trickle": cut}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--body-bytes", type=int, default=3_900_000)
    parser.add_argument("--path", default="/nowhere")
    parser.add_argument("--hold", type=float, default=15.0)
    parser.add_argument("--trickle-max", type=float, default=90.0)
    parser.add_argument(
        "--smoke", action="store_true", help="2 connections of 200 KB, a 2 s body timeout"
    )
    args = parser.parse_args(argv)
    server = {"body_timeout_seconds": SMOKE_BODY_TIMEOUT_S} if args.smoke else None
    if args.smoke:
        vars(args).update(SMOKE)
    signal.signal(signal.SIGTERM, raise_interrupt)
    print(f"{machine()}; load average at start {loadavg()}", flush=True)
    with work_folder("amaris-slow-bodies-", None) as workdir:
        try:
            with keyed_serve(workdir, server) as (child, port):
                asyncio.run(measure(port, child.pid, args))
        except KeyboardInterrupt:
            print("interrupted; server stopped", file=sys.stderr)
            return 130
    print(f"load average at end {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
