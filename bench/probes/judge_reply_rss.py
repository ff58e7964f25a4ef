"""Resident memory of ``amaris serve`` after huge judge replies.

Starts a fake OpenAI-compatible judge (the ``amaris.sim.judge_server`` app, the one the
offline LLM and the tests' fake serve, under uvicorn, in its own process) whose reply to a
rollout whose output is ``HUGE`` is one ``--reply-mb`` MB chat completion: a valid verdict
JSON whose first reason is that long (what a misconfigured or hostile judge may send); every
other rollout gets the offline judge's answer. Then starts ``amaris serve`` judging through
it (``hashing`` embedder, data in a temporary folder), waits until it is idle, and:

1. sends ``--warmup`` ordinary ``/score`` requests, waits until idle, reads the server's
   ``VmRSS`` (``/proc/<pid>/status``): *before*;
2. sends ``--huge`` ``/score`` requests whose judge reply is huge, one after the other,
   sampling ``VmRSS`` every 0.1 s meanwhile (*peak*), waits until idle, reads it: *after*.

Prints each huge request's status and reason and the three RSS figures
(``docs/benchmarks.md`` quotes them with this command). Stops both processes by PID at the end.
To measure other code (e.g. main's) under the same script, run it with
``PYTHONPATH=<that tree>`` (the servers inherit it).

Usage::

    .venv/bin/python -m bench.probes.judge_reply_rss [--reply-mb 150] [--warmup 20] [--huge 3]
        [--chunked] [--keep DIR] [--smoke]

``--smoke``: one ordinary request, then one 1 MB reply (four times the judge's reply limit).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
import yaml

from amaris.agents.prompts import parse_data_message
from amaris.app.running import free_port
from amaris.offline.judge import respond
from amaris.sim.judge_server import Reply, create_llm_app
from amaris.sim.wire import ChatRequest
from bench._common import (
    API_KEY,
    ROOT,
    Child,
    amaris_executable,
    child_env,
    loadavg,
    settle,
    this_script,
    wait_ready,
    work_folder,
)

HUGE = "HUGE"
SMOKE = {"reply_mb": 1, "warmup": 1, "huge": 1}


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


def huge_body(megabytes: int) -> bytes:
    """A chat completion whose verdicts JSON (criteria A1, A2) has a reason of that size."""
    reason = "x" * (megabytes * 1_000_000)
    verdicts = {
        "verdicts": [
            {"id": "A1", "reason": reason, "score": 4},
            {"id": "A2", "reason": "ok", "score": 4},
        ]
    }
    message = {"role": "assistant", "content": json.dumps(verdicts)}
    return json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}).encode()


def in_pieces(body: bytes, size: int = 1_000_000) -> Iterator[bytes]:
    """``body`` in pieces: streamed without a length (chunked)."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def serve_fake(port: int, megabytes: int, chunked: bool) -> None:
    """The fake judge, in this process until it is stopped."""
    body = huge_body(megabytes)

    async def responder(request: ChatRequest) -> Reply:
        messages = request.get("messages") or []
        try:
            output = parse_data_message(messages[1]["content"])["rollout"]["output"]
        except (IndexError, KeyError, TypeError, ValueError):
            output = None
        if output == HUGE:
            return Reply(body=in_pieces(body) if chunked else body)
        return Reply(content=respond(messages))

    uvicorn.run(create_llm_app(responder), host="127.0.0.1", port=port, log_level="warning")


RUBRIC = {
    "anchor_rubrics": [
        {"text": "The response gives the correct final answer.", "weight": 1.0},
        {"text": "The response shows its working.", "weight": 0.5},
    ],
    "adaptive_rubrics": [],
}


def score_body(i: int, output: str) -> dict[str, Any]:
    return {
        "rollout": {
            "id": f"r{i}",
            "input": "What is 2+2?",
            "output": output,
            "supplemental_context": "4",
        },
        "metadata": {"current_step": 0},
    }


def sample_peak(pid: int, stop: threading.Event, peak: list[float]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mb(pid))
        time.sleep(0.1)


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env = child_env()
    exe = amaris_executable()
    children: list[Child] = []
    try:
        llm_port = free_port()
        fake = Child(
            "fake-judge",
            [
                *this_script(__spec__.name),
                "--serve-fake",
                str(llm_port),
                "--reply-mb",
                str(args.reply_mb),
                *(["--chunked"] if args.chunked else []),
            ],
            workdir / "fake-judge.log",
            ROOT,
            env,
        )
        children.append(fake)
        llm_url = f"http://127.0.0.1:{llm_port}/v1"
        port = free_port()
        config: dict[str, Any] = {
            "server": {"host": "127.0.0.1", "port": port},
            "client": {"default": {"base_url": llm_url, "api_key": API_KEY}},
            "agents": {"default": {"timeout": 300}},
            "memory": {"path": str(workdir / "data"), "embedding_model": "hashing"},
            "logging": {"level": "WARNING"},
            **RUBRIC,
        }
        path = workdir / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        amaris = Child(
            "amaris", [exe, "serve", "--config", str(path)], workdir / "amaris.log", workdir, env
        )
        children.append(amaris)
        url = f"http://127.0.0.1:{port}"
        wait_ready(fake, f"{llm_url}/models", lambda r: bool(r.json().get("data")))
        wait_ready(amaris, f"{url}/healthz", lambda r: r.json().get("judge_backend") == llm_url)
        settle(amaris)
        with httpx2.Client(timeout=600.0, trust_env=False) as client:
            for i in range(args.warmup):
                r = client.post(f"{url}/score", json=score_body(i, "The answer is 4."))
                r.raise_for_status()
            settle(amaris, after_startup=False)
            before = rss_mb(amaris.pid)
            peak = [before]
            stop = threading.Event()
            sampler = threading.Thread(target=sample_peak, args=(amaris.pid, stop, peak))
            sampler.start()
            answers = []
            try:
                for i in range(args.huge):
                    r = client.post(f"{url}/score", json=score_body(1000 + i, HUGE))
                    answer = r.json()
                    reason = str(answer.get("reason") or "")
                    answers.append((r.status_code, answer.get("status"), reason[:120]))
                    print(f"  huge reply {i + 1}: {answers[-1]}", flush=True)
            finally:
                stop.set()
                sampler.join()
        settle(amaris, after_startup=False)
        after = rss_mb(amaris.pid)
        return {"before": before, "peak": peak[0], "after": after, "answers": answers}
    finally:
        for child in reversed(children):
            child.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reply-mb", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--huge", type=int, default=3)
    parser.add_argument(
        "--chunked", action="store_true", help="stream the huge reply without a length"
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep the work files here")
    parser.add_argument("--smoke", action="store_true", help="one ordinary, one 1 MB reply")
    parser.add_argument("--serve-fake", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    if args.serve_fake is not None:
        serve_fake(args.serve_fake, args.reply_mb, args.chunked)
        return
    with work_folder("amaris-bench-rss-", args.keep) as workdir:
        result = run(args, workdir)
    growth = result["after"] - result["before"]
    print(
        f"RSS before {result['before']:.1f} MB, peak {result['peak']:.1f} MB, after "
        f"{result['after']:.1f} MB (+{growth:.1f} MB) after {args.huge} replies of "
        f"{args.reply_mb} MB; load {loadavg()}"
    )


if __name__ == "__main__":
    main()
