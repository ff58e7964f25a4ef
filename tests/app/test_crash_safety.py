"""``kill -9`` of the server, then a restart with the same config: nothing is lost.

Real processes: ``amaris offline-llm`` (a slow judge) and ``amaris serve`` with its
own Prefect server (no scheduled-repair worker: the restart's coordinator resumes the
step; ``tests/app/test_shutdown.py`` covers the worker), killed with SIGKILL while a
step's flow runs and while /score traffic is in flight.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from amaris.app.running import free_port
from amaris.memory.embedder import HashingEmbedder
from amaris.memory.qdrant import open_qdrant
from amaris.memory.store import MemoryStore
from amaris.rubric.store import RubricStore
from amaris.settings import load_settings
from tests.support.procs import amaris_process
from tests.support.served import calls, score, start_serve, stop

pytestmark = pytest.mark.slow


def kill9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def inspect(config: Path, step: int, ids: list[str]) -> tuple[dict[str, Any], list[int]]:
    """After the server stopped: analyses of ``ids`` and the rubric versions made at ``step``."""
    settings = load_settings(config)
    client = open_qdrant(settings.memory)
    try:
        memory = MemoryStore(client, settings.memory.collection, HashingEmbedder())
        store = RubricStore(client, settings.memory.collection, None)
        analyses = memory.get_analyses("global", step, ids)
        versions = [v.version for v in store.history() if v.step == step]
    finally:
        client.close()
    return analyses, versions


def test_kill_9_during_a_step_and_during_scoring(tmp_path: Path) -> None:
    llm_port, port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    data = tmp_path / "data"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "client": {
                    "default": {"base_url": f"http://127.0.0.1:{llm_port}/v1", "api_key": "test"}
                },
                "concurrency": {"analyzer": 2, "scorer": 4},
                "memory": {"path": str(data), "embedding_model": "hashing"},
                "server": {"port": port},
                # Its own Prefect server (an ephemeral port), killed with it; no repair
                # worker: a third process booting beside the two at each of the three
                # starts, and the resume is the coordinator's, not a scheduled repair's.
                "prefect": {"port": None, "repair_interval_seconds": None},
                "logging": {"level": "INFO"},
            }
        )
    )
    llm_args = ["offline-llm", "--port", str(llm_port), "--latency-ms", "400"]
    with amaris_process(
        llm_args, tmp_path, f"http://127.0.0.1:{llm_port}/v1/models", tmp_path / "llm.log"
    ):
        # 1. kill -9 while step 1's flow runs
        server = start_serve(config, tmp_path, url, tmp_path / "serve.log")
        try:
            ids = [f"s1-{i}" for i in range(12)]
            # four at a time, the scorer's concurrency: each waits the judge's 400 ms
            with ThreadPoolExecutor(4) as pool:
                codes = list(pool.map(lambda i: score(url, 1, i).status_code, range(12)))
            assert codes == [200] * 12
            assert httpx.post(f"{url}/complete", json={}, timeout=10).json() == {
                "status": "complete"
            }
            deadline = time.monotonic() + 120
            while calls(data, "analyzer", 1) < 4:
                assert time.monotonic() < deadline, "the step's analyses did not start"
                time.sleep(0.1)
            kill9(server)
            before = calls(data, "analyzer", 1)
            assert before < 12  # killed mid-step

            # 2. restart: the step resumes and reuses the analyses that finished
            server = start_serve(config, tmp_path, url, tmp_path / "serve.log")
            done = httpx.get(
                f"{url}/rubric_status/wait", params={"step": 1, "timeout": 180}, timeout=200
            ).json()
            assert done["status"] == "updated", done
            after = calls(data, "analyzer", 1) - before
            # at most the calls in flight at the kill (concurrency 2) are made twice
            assert after <= 12 - before + 2

            # 3. kill -9 during /score traffic for step 2
            answered: list[str] = []

            def client(index: int) -> None:
                try:
                    if score(url, 2, index).status_code == 200:
                        answered.append(f"s2-{index}")
                except httpx.HTTPError:
                    pass  # the request the kill cut off

            threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 120
            while len(answered) < 6:
                assert time.monotonic() < deadline, f"only {len(answered)} rollouts answered"
                time.sleep(0.02)
            kill9(server)
            for thread in threads:
                thread.join(60)
            assert 6 <= len(answered) < 24
            server = start_serve(config, tmp_path, url, tmp_path / "serve.log")
            assert httpx.post(f"{url}/complete", json={"step": 2}, timeout=10).json() == {
                "status": "complete"
            }
            done = httpx.get(
                f"{url}/rubric_status/wait", params={"step": 2, "timeout": 180}, timeout=200
            ).json()
            # ran to its end; what it did to the rubric depends on the rollouts the kill let in
            assert done["status"] not in ("failed", "pending"), done
        finally:
            stop(server)
    analyses, versions = inspect(config, 1, ids)
    assert sorted(analyses) == sorted(ids)
    assert len(versions) <= 1
    analyses, versions = inspect(config, 2, answered)
    assert sorted(analyses) == sorted(answered)  # every rollout that got a 200
    assert len(versions) <= 1
