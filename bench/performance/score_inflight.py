"""How many judge calls amaris keeps in flight while ``--clients`` clients send ``/score``.

A throughput ratio measured with wall time moves with the machine's load; the number of
judge requests in flight at the judge does not, as long as nothing inside amaris queues
them: with ``N`` clients each waiting on one ``/score``, up to ``N`` judge calls can be in
flight. A maximum below ``N`` is a limit in amaris (a semaphore, a connection pool, a
lock, a thread pool) that the clients queue behind; a time-weighted mean well below the
maximum is time spent before or after the judge call.

Starts two processes it owns, bound to 127.0.0.1: a judge (the offline judge's app,
``amaris.sim.judge_server``, sleeping ``--latency-ms`` per call) wrapped in a counter of
the chat-completion requests in flight, and ``amaris serve`` judging through it (score
cache off, no per-endpoint limit: the configuration of ``score_throughput``). Runs the
closed loop for ``--duration`` seconds after a warm-up, then reads the counter: the
maximum in flight, the time-weighted mean, the share of the window spent at each level,
and amaris's CPU per request.

Usage::

    .venv/bin/python -m bench.performance.score_inflight [--clients 64] [--latency-ms 200]
        [--duration 10] [--warmup 3]

Prints its figures; ``docs/benchmarks.md`` quotes them with this command.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
import yaml

import bench._common
from amaris.app.running import free_port, proc_stat, session_pids
from amaris.sim.judge_server import FaultProfile, create_llm_app, offline_responder
from bench._common import (
    API_KEY,
    CLK_TCK,
    Child,
    amaris_executable,
    child_env,
    loadavg,
    open_client,
    require_py_spy,
    settle,
    wait_servers_ready,
    work_folder,
)
from bench.performance.score_throughput import amaris_sender

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
SendAsgi = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, SendAsgi], Awaitable[None]]


def cpu_by_part(amaris_pid: int) -> dict[str, float]:
    """CPU seconds so far of amaris's main thread, its other threads, and the processes
    it started (Prefect's server), from ``/proc``."""
    parts = {"main thread": 0.0, "other threads": 0.0, "child processes": 0.0}
    for pid in session_pids(amaris_pid):
        if pid != amaris_pid:
            fields = proc_stat(pid)
            if fields is not None:
                parts["child processes"] += (int(fields[11]) + int(fields[12])) / CLK_TCK
            continue
        for task in Path(f"/proc/{pid}/task").iterdir():
            fields = proc_stat(pid, int(task.name))
            if fields is not None:
                part = "main thread" if int(task.name) == pid else "other threads"
                parts[part] += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return parts


@dataclass
class InFlight:
    """Chat-completion requests in flight: the maximum and the time spent at each level."""

    current: int = 0
    maximum: int = 0
    since: float = field(default_factory=time.monotonic)
    seconds_at: dict[int, float] = field(default_factory=dict)
    calls: int = 0

    def _tick(self) -> None:
        now = time.monotonic()
        self.seconds_at[self.current] = self.seconds_at.get(self.current, 0.0) + now - self.since
        self.since = now

    def enter(self) -> None:
        self._tick()
        self.current += 1
        self.calls += 1
        self.maximum = max(self.maximum, self.current)

    def leave(self) -> None:
        self._tick()
        self.current -= 1

    def reset(self) -> None:
        self._tick()
        self.maximum = self.current
        self.seconds_at = {}
        self.calls = 0

    def report(self) -> dict[str, Any]:
        self._tick()
        total = sum(self.seconds_at.values()) or 1.0
        mean = sum(level * s for level, s in self.seconds_at.items()) / total
        return {
            "max": self.maximum,
            "mean": mean,
            "calls": self.calls,
            "share_at": {str(k): v / total for k, v in sorted(self.seconds_at.items())},
        }


def counting_judge(latency_ms: float) -> Asgi:
    """The offline judge's app behind a counter; ``POST /stats`` reads it,
    ``POST /stats/reset`` resets it."""
    inner = create_llm_app(offline_responder(FaultProfile(latency_ms)))
    counter = InFlight()

    async def app(scope: Scope, receive: Receive, send: SendAsgi) -> None:
        path = scope.get("path")
        if scope["type"] != "http" or path not in (
            "/stats",
            "/stats/reset",
            "/v1/chat/completions",
        ):
            await inner(scope, receive, send)
            return
        if path in ("/stats", "/stats/reset"):
            body = json.dumps(counter.report()).encode()
            if path == "/stats/reset":
                counter.reset()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        counter.enter()
        try:
            await inner(scope, receive, send)
        finally:
            counter.leave()

    return app


async def load(
    amaris_url: str,
    judge_url: str,
    amaris_pid: int,
    clients: int,
    warmup: float,
    duration: float,
    profile: list[str],
) -> tuple[dict[str, Any], int, dict[str, float]]:
    """Closed loop of ``clients`` workers; the judge's counter over the window, the
    requests completed in it, and amaris's CPU seconds in it (``profile``: a profiler's
    command run over the window)."""
    send = amaris_sender(amaris_url)
    counter = itertools.count()
    done = 0
    errors: list[str] = []
    async with open_client("httpx2", clients + 8, 120.0) as client:
        loop = asyncio.get_running_loop()
        end = loop.time() + warmup + duration
        window_start = loop.time() + warmup

        async def worker() -> None:
            nonlocal done
            while loop.time() < end:
                error = await send(client, next(counter))
                if error is not None and len(errors) < 3:
                    errors.append(error)
                if window_start <= loop.time() <= end:
                    done += 1

        cpu: list[dict[str, float]] = []

        async def probe() -> dict[str, Any]:
            await asyncio.sleep(warmup)
            await client.post(f"{judge_url}/stats/reset", json={})
            cpu.append(cpu_by_part(amaris_pid))
            profiler = (
                await asyncio.create_subprocess_exec(
                    *profile, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                if profile
                else None
            )
            await asyncio.sleep(duration)
            cpu.append(cpu_by_part(amaris_pid))
            if profiler is not None:
                await profiler.wait()
            response = await client.post(f"{judge_url}/stats", json={})
            report: dict[str, Any] = response.json()
            return report

        results = await asyncio.gather(probe(), *(worker() for _ in range(clients)))
    for error in errors:
        print(f"  error: {error}", file=sys.stderr)
    stats: dict[str, Any] = results[0]
    return stats, done, {part: cpu[1][part] - cpu[0][part] for part in cpu[0]}


def serve_judge(port: int, latency_ms: float) -> None:
    uvicorn.run(
        counting_judge(latency_ms),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--serve-judge", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=Path, default=None, help="keep the files here")
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="record amaris's threads with py-spy over the window into FILE (raw stacks)",
    )
    parser.add_argument(
        "--amaris-pythonpath",
        default=None,
        help="PYTHONPATH of amaris serve only (e.g. a worktree of an older commit)",
    )
    args = parser.parse_args()
    if args.serve_judge is not None:
        serve_judge(args.serve_judge, args.latency_ms)
        return
    # On a loaded machine amaris's Prefect server can take minutes to start.
    bench._common.STARTUP_TIMEOUT_S = 600.0
    env = child_env()
    with work_folder("amaris-inflight-", args.keep) as workdir:
        judge_port = free_port()
        judge = Child(
            "judge",
            [
                sys.executable,
                "-m",
                "bench.performance.score_inflight",
                "--serve-judge",
                str(judge_port),
                "--latency-ms",
                f"{args.latency_ms:g}",
            ],
            workdir / "judge.log",
            Path.cwd(),
            env,
        )
        amaris: Child | None = None
        try:
            judge_url = f"http://127.0.0.1:{judge_port}"
            llm_url = f"{judge_url}/v1"
            port = free_port()
            config = {
                "server": {"host": "127.0.0.1", "port": port},
                "client": {
                    "default": {"base_url": llm_url, "api_key": API_KEY, "max_concurrency": 0}
                },
                "memory": {"path": str(workdir / "data")},
                "logging": {"level": "WARNING"},
                "scoring": {"cache_size": 0},
            }
            path = workdir / "config.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
            amaris_env = dict(env)
            if args.amaris_pythonpath:
                amaris_env["PYTHONPATH"] = args.amaris_pythonpath
            amaris = Child(
                "amaris",
                [amaris_executable(), "serve", "--config", str(path)],
                workdir / "amaris.log",
                workdir,
                amaris_env,
            )
            amaris_url = f"http://127.0.0.1:{port}"
            wait_servers_ready(judge, llm_url, amaris, amaris_url)
            settle(amaris)
            load_start = loadavg()
            profile: list[str] = []
            if args.py_spy is not None:
                # py-spy records amaris's threads over the window (started at its start).
                profile = [
                    require_py_spy(args.py_spy),
                    "record",
                    "--pid",
                    str(amaris.pid),
                    "--rate",
                    "250",
                    "--duration",
                    f"{args.duration:.0f}",
                    "--format",
                    "raw",
                    "--threads",
                    "--nonblocking",
                    "--output",
                    str(args.py_spy),
                ]
            stats, done, cpu_s = asyncio.run(
                load(
                    amaris_url,
                    judge_url,
                    amaris.pid,
                    args.clients,
                    args.warmup,
                    args.duration,
                    profile,
                )
            )
        finally:
            if amaris is not None:
                amaris.stop()
            judge.stop()
    cpu = sum(cpu_s.values()) * 1000.0 / max(1, done)
    parts = ", ".join(f"{k} {v * 1000.0 / max(1, done):.2f}" for k, v in cpu_s.items())
    busy = {k: round(v, 3) for k, v in stats["share_at"].items() if v >= 0.01}
    print(
        f"clients {args.clients}, judge {args.latency_ms:g} ms, {args.duration:g} s "
        f"(load {load_start} -> {loadavg()}): judge calls in flight max {stats['max']}, "
        f"time-weighted mean {stats['mean']:.1f}; {done} /score in the window "
        f"({stats['calls']} judge calls); amaris CPU ~{cpu:.2f} ms per /score"
    )
    print(f"  amaris CPU ms per /score by part: {parts}")
    print(f"  share of the window at each level (>= 1%): {busy}")


if __name__ == "__main__":
    main()
