"""The judge's HTTP client: amaris's (``aiohttp``) against the ``openai`` SDK's own routes, at
a trainer's concurrency, on what a trainer feels.

Starts ``amaris offline-llm --latency-ms L`` (the judge server the tests' fake LLM is built
on: ``amaris.sim.judge_server``; a process it owns, on 127.0.0.1; 200 ms by default) and
measures each transport in two ways:

* **judge calls**, in this process: batches of ``--calls`` concurrent chat-completion
  requests (the scorer's real request, sent and parsed as ``OpenAIProvider.complete`` does),
  the batch's wall time and this process's CPU per call (``time.process_time``);
* **/batch_score**, through ``amaris serve`` judging with the transport (a process it owns):
  batches of ``--calls`` new rollouts, one ``POST /batch_score`` each, their wall time and
  the serve process's CPU per reward (``/proc``, its own threads, not its Prefect server);
  then one step of those rollouts, ``POST /complete`` -> ``/rubric_status/wait`` answered
  (a warm-up step runs first, after a warm-up batch).

Transports, each doing the whole job (bounded reads of the reply and of an error body, one
deadline for the attempt, the SDK's error types, one client per event loop, no proxy
lookup per request):

* ``aiohttp``: :class:`amaris.llm.transport.JsonEndpoint`, what amaris ships;
* ``sdk``: ``AsyncOpenAI.chat.completions.with_streaming_response.create`` over the SDK's
  ``httpx2`` client (unbounded pool), the body read with a byte limit;
* ``sdk-post``: the SDK's generic ``post`` (``cast_to=httpx2.Response``, streamed): no
  parameter transform, its cheapest route;
* ``sdk-aiohttp``: ``sdk-post`` over the SDK's own ``aiohttp`` transport
  (``openai.DefaultAioHttpClient``, the ``openai[aiohttp]`` extra).

``amaris serve`` runs this script again (``--serve-with``), which puts the transport in place
of ``JsonEndpoint`` before it serves. Rounds alternate the order of the transports, so that
drifting load hits them alike. The judge shares this machine's cores: a remote judge would
not, and the batches would end sooner with every transport.

Target: amaris's own client stays while it beats every SDK route on a figure a trainer
feels: the ``/batch_score`` batch ends at least 10% sooner (median), or the service spends
at most two thirds of the CPU a reward.

Usage::

    .venv/bin/python -m bench.performance.judge_transport [--calls 256] [--batches 5]
        [--rounds 3] [--latency-ms 200] [--transports aiohttp,sdk,sdk-post,sdk-aiohttp]
        [--keep DIR] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import httpx2
import openai
import yaml

from amaris.agents.prompts import load_prompts
from amaris.app.running import free_port, proc_stat
from amaris.llm import providers
from amaris.llm.providers import parse_completion
from amaris.llm.transport import (
    ERROR_BODY_BYTES,
    KEEPALIVE_EXPIRY_S,
    ChatBody,
    JsonEndpoint,
    ResponseTooLargeError,
    environment_proxy,
    status_error,
)
from amaris.settings import ProviderJSON, Settings
from bench._common import (
    API_KEY,
    CLK_TCK,
    ROOT,
    Child,
    amaris_executable,
    child_env,
    doc_section,
    fmt,
    loadavg,
    markers,
    raise_interrupt,
    settle,
    start_offline_llm,
    wait_ready,
    wait_servers_ready,
    work_folder,
    write_doc,
)
from bench.performance.score_throughput import rollout_fields, scorer_request_body

MODULE = "bench.performance.judge_transport"
TRANSPORTS = ("aiohttp", "sdk", "sdk-post", "sdk-aiohttp")
MARK_START, MARK_END = markers("judge_transport")
TARGET_SOONER = 1.10
"""An SDK route's /batch_score batch takes at least this multiple of amaris's client's."""
TARGET_CPU = 1.5
"""Or the service's CPU a reward with it is at least this multiple of amaris's client's."""
WAIT_S = 60.0
"""``timeout`` of one ``/rubric_status/wait`` request."""
REQUEST_TIMEOUT_S = 300.0


# -- the SDK's routes ----------------------------------------------------------------------
async def read_limited(response: httpx2.Response, limit: int, *, cut: bool = False) -> bytes:
    """``response``'s decoded body, at most ``limit`` bytes held (``cut``: its first
    ``limit`` bytes instead of an error)."""
    declared = response.headers.get("content-length")
    if not cut and declared is not None and declared.isdigit() and int(declared) > limit:
        raise ResponseTooLargeError(int(declared), limit, declared=True)
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            if cut:
                return bytes(body[:limit])
            raise ResponseTooLargeError(len(body), limit, declared=False)
    return bytes(body)


async def bounded_error(response: httpx2.Response) -> None:
    """httpx's response hook: a non-2xx answer raises the SDK's error from its first
    :data:`ERROR_BODY_BYTES` (the SDK would read the whole body; it passes its own errors
    on as they are)."""
    if not response.is_success:
        content = await read_limited(response, ERROR_BODY_BYTES, cut=True)
        raise status_error(
            str(response.request.url), response.status_code, response.headers.raw, content
        )


class SdkEndpoint:
    """:class:`~amaris.llm.transport.JsonEndpoint`'s job done by an ``openai.AsyncOpenAI``
    client: one copy of ``client`` per event loop, over its own HTTP client."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        route: Literal["create", "post"] = "create",
        http: Literal["httpx2", "aiohttp"] = "httpx2",
    ) -> None:
        self._sdk = client
        self._route = route
        self._http = http
        self._proxy = environment_proxy(str(client.base_url))
        self._ssl = httpx2.create_ssl_context()
        self._clients: dict[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = {}

    def _client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed():
            aiohttp = self._http == "aiohttp"
            kind = openai.DefaultAioHttpClient if aiohttp else openai.DefaultAsyncHttpxClient
            http = kind(
                # No cap: the gateway's limits bound the requests in flight (aiohttp: 0).
                limits=httpx2.Limits(
                    max_connections=0 if aiohttp else None,
                    max_keepalive_connections=None,
                    keepalive_expiry=KEEPALIVE_EXPIRY_S,
                ),
                proxy=self._proxy,
                verify=self._ssl,
                trust_env=False,
                headers={"Accept-Encoding": "identity"},
                event_hooks={"response": [bounded_error]},
            )
            client = self._sdk.with_options(http_client=http)
            self._clients[loop] = client
        return client

    async def post(
        self,
        path: str,
        body: ChatBody,
        timeout: float | None,
        max_bytes: int,
        extra: ProviderJSON | None = None,
        on_headers: Callable[[Mapping[str, str]], None] | None = None,
    ) -> bytes:
        """As :meth:`JsonEndpoint.post <amaris.llm.transport.JsonEndpoint.post>`."""
        client = self._client()
        try:
            async with asyncio.timeout(timeout):
                if self._route == "post":
                    sent = {**body, **extra.root} if extra else dict(body)
                    raw = await client.post(
                        path,
                        cast_to=httpx2.Response,
                        body=sent,
                        options={"timeout": timeout},
                        stream=True,
                    )
                    try:
                        if on_headers is not None:
                            on_headers(raw.headers)
                        return await read_limited(raw, max_bytes)
                    finally:
                        await raw.aclose()
                create: Any = client.chat.completions.with_streaming_response.create
                async with create(
                    **body, extra_body=extra.root if extra else None, timeout=timeout
                ) as response:
                    if on_headers is not None:
                        on_headers(response.http_response.headers)
                    return await read_limited(response.http_response, max_bytes)
        except TimeoutError as exc:
            raise openai.APITimeoutError(request=httpx2.Request("POST", path)) from exc
        except httpx2.TimeoutException as exc:  # a wait for body bytes
            raise openai.APITimeoutError(request=exc.request) from exc
        except httpx2.RequestError as exc:  # a body cut short or malformed
            raise openai.APIConnectionError(
                message=f"Connection error: {type(exc).__name__}: {exc}", request=exc.request
            ) from exc

    async def close(self) -> None:
        """Close the clients of the running loop (this benchmark's loops end with theirs)."""
        current = asyncio.get_running_loop()
        for loop in [loop for loop in self._clients if loop is current]:
            await self._clients.pop(loop).close()


def endpoint(transport: str, client: openai.AsyncOpenAI) -> JsonEndpoint | SdkEndpoint:
    """``transport``'s endpoint over ``client``'s configuration."""
    if transport == "aiohttp":
        return JsonEndpoint(client)
    if transport == "sdk":
        return SdkEndpoint(client)
    if transport == "sdk-post":
        return SdkEndpoint(client, route="post")
    return SdkEndpoint(client, route="post", http="aiohttp")


def serve_with(transport: str, config: str) -> int:
    """``amaris serve --config config`` with ``transport`` in place of ``JsonEndpoint``."""
    from amaris.cli.entry import main

    def build(client: openai.AsyncOpenAI) -> JsonEndpoint | SdkEndpoint:
        return endpoint(transport, client)

    # What OpenAIProvider builds its endpoint with: the only difference between the runs.
    providers.JsonEndpoint = build  # type: ignore[attr-defined, assignment]
    return main(["serve", "--config", config])


# -- measurements --------------------------------------------------------------------------
@dataclass
class Figures:
    """One transport's samples over every round."""

    call_walls: list[float] = field(default_factory=list)
    """Wall time of each in-process batch of judge calls (s)."""
    call_cpu: list[float] = field(default_factory=list)
    """This process's CPU per call of each batch (s)."""
    batch_walls: list[float] = field(default_factory=list)
    """Wall time of each ``/batch_score`` (s)."""
    reward_cpu: list[float] = field(default_factory=list)
    """The serve process's CPU per reward of each ``/batch_score`` (s)."""
    steps: list[float] = field(default_factory=list)
    """Wall time of each measured step (s)."""
    round_batch_medians: list[float] = field(default_factory=list)


async def judge_calls(
    transport: str, url: str, body: ChatBody, calls: int, batches: int
) -> list[tuple[float, float]]:
    """(wall, CPU per call) of ``batches`` batches of ``calls`` concurrent requests, after a
    warm-up batch (it opens the connections)."""
    options = Settings().agents.for_agent("scorer")
    sdk = openai.AsyncOpenAI(api_key=API_KEY, base_url=url, max_retries=0)
    client = endpoint(transport, sdk)

    async def one() -> None:
        raw = await client.post(
            "chat/completions", body, options.timeout, options.max_response_bytes
        )
        parse_completion(raw)

    samples = []
    try:
        await asyncio.gather(*(one() for _ in range(calls)))
        for _ in range(batches):
            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(one() for _ in range(calls)))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            samples.append((wall, cpu / calls))
    finally:
        await client.close()
        await sdk.close()
    return samples


def process_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` (all its threads, not its children)."""
    fields = proc_stat(pid)
    if fields is None:
        raise RuntimeError(f"no /proc/{pid}/stat")
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def items(step: int, numbers: Iterator[int], calls: int) -> list[dict[str, Any]]:
    """``calls`` new rollouts of ``step`` as /batch_score items."""
    out = []
    for _ in range(calls):
        n = next(numbers)
        fields = rollout_fields(n)
        out.append(
            {
                "rollout": {"id": f"r{n}", **fields},
                "metadata": {"current_step": step},
            }
        )
    return out


def complete_step(http: httpx2.Client, step: int) -> float:
    """``POST /complete`` for ``step``, then ``/rubric_status/wait`` until it is final:
    seconds from the first to the answer."""
    start = time.perf_counter()
    http.post("/complete", json={"step": step}).raise_for_status()
    while True:
        response = http.get("/rubric_status/wait", params={"step": step, "timeout": WAIT_S})
        response.raise_for_status()
        status = response.json().get("status")
        if status != "pending":
            if status == "failed":
                raise RuntimeError(f"step {step} failed: {response.text[:500]}")
            return time.perf_counter() - start


def served(
    transport: str,
    llm: Child,
    llm_url: str,
    folder: Path,
    numbers: Iterator[int],
    args: argparse.Namespace,
    figures: Figures,
) -> None:
    """Start ``amaris serve`` with ``transport``, measure its batches and a step, stop it."""
    port = free_port()
    workdir = folder / f"{transport}-{port}"
    workdir.mkdir()
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        # No per-endpoint limit: the judge on 127.0.0.1 stands for a hosted one.
        "client": {"default": {"base_url": llm_url, "api_key": API_KEY, "max_concurrency": 0}},
        "memory": {"path": str(workdir / "data"), "embedding_model": None},
        "logging": {"level": "WARNING"},
        "prefect": {"port": None, "repair_interval_seconds": None},
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    argv = [sys.executable, "-m", MODULE, "--serve-with", transport, "--config", str(path)]
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    amaris = Child("amaris", argv, workdir / "amaris.log", workdir, env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_servers_ready(llm, llm_url, amaris, url)
        with httpx2.Client(base_url=url, timeout=REQUEST_TIMEOUT_S, trust_env=False) as http:

            def batch(step: int) -> tuple[float, float]:
                body = {"items": items(step, numbers, args.calls)}
                cpu, wall = process_cpu(amaris.pid), time.perf_counter()
                response = http.post("/batch_score", json=body)
                wall, cpu = time.perf_counter() - wall, process_cpu(amaris.pid) - cpu
                response.raise_for_status()
                results = response.json()["results"]
                unscored = [r for r in results if r.get("status") != "scored"]
                if unscored:
                    raise RuntimeError(f"{len(unscored)} not scored, e.g. {unscored[0]}")
                return wall, cpu / args.calls

            batch(0)
            complete_step(http, 0)
            settle(amaris, after_startup=False)
            walls = []
            for step in range(1, args.batches + 1):
                wall, cpu = batch(step)
                walls.append(wall)
                figures.reward_cpu.append(cpu)
            figures.batch_walls += walls
            figures.round_batch_medians.append(statistics.median(walls))
            figures.steps.append(complete_step(http, 1))
    finally:
        amaris.stop()


def measure(args: argparse.Namespace, folder: Path) -> dict[str, Figures]:
    """Every transport's figures, rounds alternating their order."""
    settings = Settings()
    body = cast(
        ChatBody,
        scorer_request_body(settings, load_prompts(settings.prompts)["scorer"], rollout_fields(0)),
    )
    figures = {name: Figures() for name in args.transports}
    numbers = itertools.count()
    llm, llm_url = start_offline_llm(amaris_executable(), args.latency_ms, folder, child_env())
    try:
        wait_ready(llm, f"{llm_url}/models", lambda response: True)
        for round_ in range(args.rounds):
            order = args.transports if round_ % 2 == 0 else args.transports[::-1]
            for name in order:
                got = asyncio.run(judge_calls(name, llm_url, body, args.calls, args.batches))
                figures[name].call_walls += [wall for wall, _ in got]
                figures[name].call_cpu += [cpu for _, cpu in got]
                served(name, llm, llm_url, folder, numbers, args, figures[name])
                f = figures[name]
                print(
                    f"round {round_ + 1} {name:<11} calls: batch "
                    f"{statistics.median(w for w, _ in got) * 1000:6.0f} ms, "
                    f"{statistics.median(c for _, c in got) * 1000:.3f} ms CPU a call; "
                    f"/batch_score {f.round_batch_medians[-1] * 1000:6.0f} ms, "
                    f"{statistics.median(f.reward_cpu[-args.batches :]) * 1000:.2f} ms CPU "
                    f"a reward; step {f.steps[-1]:.2f} s",
                    flush=True,
                )
    finally:
        llm.stop()
    return figures


# -- report --------------------------------------------------------------------------------
def ms(values: list[float], digits: int = 0) -> str:
    return fmt(statistics.median(values) * 1000, digits)


def verdicts(figures: dict[str, Figures]) -> list[tuple[str, str, str]]:
    """One target line per SDK route measured beside amaris's client."""
    ours = figures.get("aiohttp")
    if ours is None:
        return []
    batch, cpu = statistics.median(ours.batch_walls), statistics.median(ours.reward_cpu)
    lines = []
    for name, other in figures.items():
        if name == "aiohttp":
            continue
        slower = statistics.median(other.batch_walls) / batch
        costlier = statistics.median(other.reward_cpu) / cpu
        verdict = "PASS" if slower >= TARGET_SOONER or costlier >= TARGET_CPU else "FAIL"
        lines.append(
            (
                f"amaris's client beats `{name}` (/batch_score batch x{TARGET_SOONER:.2f}, "
                f"or CPU a reward x{TARGET_CPU:.1f})",
                f"batch x{slower:.2f}, CPU a reward x{costlier:.2f}",
                verdict,
            )
        )
    return lines


def section(
    figures: dict[str, Figures], args: argparse.Namespace, started: datetime, load: str
) -> str:
    rows = [
        f"| `{name}` | {ms(f.call_walls)} | {ms(f.call_cpu, 3)} | {ms(f.batch_walls)} "
        f"({ms([min(f.round_batch_medians)])}-{ms([max(f.round_batch_medians)])}) | "
        f"{ms(f.reward_cpu, 2)} | "
        f"{fmt(statistics.median(f.steps), 2)} |"
        for name, f in figures.items()
    ]
    table = "\n".join(
        [
            f"| transport | {args.calls} judge calls, wall (ms) | CPU ms a call | "
            f"/batch_score of {args.calls}, wall (ms; rounds) | amaris CPU ms a reward | "
            f"step of {args.calls} rollouts (s) |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    return doc_section(
        "judge_transport",
        "Judge transport: amaris's aiohttp client vs. the openai SDK's",
        f"Batches of {args.calls} concurrent judge calls of {args.latency_ms:g} ms "
        "(`amaris offline-llm`) through each transport: in this process (CPU a call), and as "
        f"`/batch_score` of {args.calls} rollouts through `amaris serve` (CPU a reward), then "
        f"a step of those rollouts; medians of {args.rounds} rounds x {args.batches} "
        "batches, transports in alternating order. The judge shares the machine's 2 cores.",
        table,
        script=__file__,
        when=started,
        load=load,
        targets=verdicts(figures),
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=256, help="calls per batch (default 256)")
    parser.add_argument("--batches", type=int, default=5, help="batches per round (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument(
        "--latency-ms", type=float, default=200.0, help="judge latency per call (default 200)"
    )
    parser.add_argument(
        "--transports",
        type=lambda text: text.split(","),
        default=list(TRANSPORTS),
        help=f"comma-separated, of {','.join(TRANSPORTS)} (default all)",
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep the servers' files here")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "benchmarks.md",
        help="markdown file to update (default docs/benchmarks.md)",
    )
    parser.add_argument("--serve-with", choices=TRANSPORTS, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_with is None:
        unknown = set(args.transports) - set(TRANSPORTS)
        if unknown:
            parser.error(f"--transports: unknown {', '.join(sorted(unknown))}")
        if min(args.calls, args.batches, args.rounds) < 1:
            parser.error("--calls, --batches and --rounds must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_with is not None:
        return serve_with(args.serve_with, args.config)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started, load_start = datetime.now(UTC), loadavg(True)
    try:
        with work_folder("amaris-bench-transport-", args.keep) as folder:
            figures = measure(args, folder)
    except KeyboardInterrupt:
        print("interrupted; servers stopped, nothing written", file=sys.stderr)
        return 130
    text = section(figures, args, started, f"{load_start} -> {loadavg(True)}")
    print()
    print(text)
    write_doc(args.out, text, MARK_START, MARK_END)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
