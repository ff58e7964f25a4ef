"""``amaris serve`` as a real process (start, stop, /score) and its call log, for crash and
shutdown tests.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.support.pipeline_helpers import metadata, rollout
from tests.support.procs import AMARIS, amaris_env, wait_http

BEHAVIOURS = ["correct", "hacking", "wrong"]


def calls(data: Path, agent: str, step: int) -> int:
    """Successful LLM calls of ``agent`` for ``step`` in the call log."""
    path = data / "logs" / "llm_calls.jsonl"
    if not path.is_file():
        return 0
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sum(
        1 for r in lines if r["agent"] == agent and r["step"] == step and r["outcome"] == "ok"
    )


def start_serve(config: Path, cwd: Path, url: str, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    proc = subprocess.Popen(
        [*AMARIS, "serve", "--config", str(config)],
        cwd=cwd,
        env=amaris_env(),
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    out.close()
    wait_http(f"{url}/healthz", proc)
    return proc


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM ``proc`` if it runs; kill it if it has not exited 30 s later."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def score(url: str, step: int, index: int) -> httpx.Response:
    body = {
        "rollout": {**rollout(step, index, BEHAVIOURS[index % 3]), "id": f"s{step}-{index}"},
        "metadata": metadata(step),
    }
    return httpx.post(f"{url}/score", json=body, timeout=60)
