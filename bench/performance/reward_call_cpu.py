"""CPU of the trainer's side of a reward call: what the adapters cost the trainer's process.

Starts ``amaris offline-llm`` (no latency) and ``amaris serve`` judging through it
(processes it owns, on 127.0.0.1), then, in this process, calls the adapters as a trainer
does and reports this process's CPU per call (``time.process_time``) and calls per second:

* ``httpx.get``: one ``GET /healthz`` with a new client each time (``httpx.get``), the
  way a poll loop or an adapter that opens a client per call reaches a server;
* ``client``: the same ``GET`` through one ``httpx.Client``;
* ``verl``: ``amaris.integrations.verl.compute_score``, one sample per call, one call
  after the other (verl's per-sample reward function);
* ``verl-async``: ``compute_score_async``, ``--concurrency`` calls in flight on one event
  loop (verl's reward loop);
* ``openrlhf``: ``amaris.integrations.openrlhf.reward_func``, micro-batches of 8.

Every sample is a new response (amaris's score cache does not answer it). The code under
test is the one on ``PYTHONPATH`` (run it from a worktree at another commit to compare).

Usage::

    .venv/bin/python -m bench.performance.reward_call_cpu [--calls 200] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from amaris.integrations import openrlhf, verl
from bench._common import loadavg, machine, running_stack, work_folder

_counter = itertools.count()


def sample() -> tuple[str, str, dict[str, str]]:
    n = next(_counter)
    return "gsm8k", f"The answer is {n}. #### {n}", {"question": f"What is {n} + 0?"}


def timed(label: str, calls: int, run: Callable[[], None]) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"  {label:<10} {calls:5d} calls  {calls / wall:7.1f} calls/s  "
        f"{cpu / calls * 1000:7.2f} ms CPU a call (this process)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    calls = args.calls

    with work_folder("amaris-bench-reward-", None) as folder, running_stack(0, folder, {}) as st:
        os.environ["AMARIS_URL"] = st.amaris_url
        print(f"{machine()}; load {loadavg(True)}", flush=True)
        health = f"{st.amaris_url}/healthz"

        def fresh_clients() -> None:
            for _ in range(calls):
                httpx.get(health, timeout=10).raise_for_status()

        def one_client() -> None:
            with httpx.Client(timeout=10) as http:
                for _ in range(calls):
                    http.get(health).raise_for_status()

        def verl_sync() -> None:
            for _ in range(calls):
                data_source, solution, info = sample()
                result = verl.compute_score(data_source, solution, "0", info)
                assert result["status"] == "scored", result

        def verl_async() -> None:
            async def run() -> None:
                gate = asyncio.Semaphore(args.concurrency)

                async def one() -> None:
                    async with gate:
                        data_source, solution, info = sample()
                        result = await verl.compute_score_async(data_source, solution, "0", info)
                        assert result["status"] == "scored", result

                await asyncio.gather(*(one() for _ in range(calls)))

            asyncio.run(run())

        def openrlhf_batches() -> None:
            for _ in range(calls // 8):
                texts = [sample() for _ in range(8)]
                prompts = [info["question"] for _, _, info in texts]
                queries = [p + solution for p, (_, solution, _) in zip(prompts, texts, strict=True)]
                openrlhf.reward_func(queries, prompts, ["0"] * 8)

        verl_sync()  # warm-up: imports, the server's first requests
        openrlhf_batches()  # and torch's import
        timed("httpx.get", calls, fresh_clients)
        timed("client", calls, one_client)
        timed("verl", calls, verl_sync)
        timed("verl-async", calls, verl_async)
        timed("openrlhf", calls // 8, openrlhf_batches)
        print(f"  load after: {loadavg(True)}; files in {Path(folder)}", flush=True)


if __name__ == "__main__":
    main()
