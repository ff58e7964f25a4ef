"""SIGTERM: in-flight requests finish, running steps stay resumable, children stop."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fake_llm import free_port
from tests.procs import amaris_process, run_amaris
from tests.test_crash_safety import calls, score, start_serve, stop

pytestmark = pytest.mark.slow


def children(pid: int) -> list[int]:
    """Direct children of ``pid``, spawned by any of its threads (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        path = task / "children"
        if path.exists():
            found += [int(p) for p in path.read_text().split()]
    return sorted(found)


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_sigterm_drains_requests_stops_children_and_leaves_steps_resumable(
    tmp_path: Path,
) -> None:
    llm_port, port, prefect_port = free_port(), free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    data = tmp_path / "data"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "client": {"default": {"base_url": f"http://127.0.0.1:{llm_port}/v1",
                               "api_key": "test"}},
        "concurrency": {"analyzer": 1},
        "memory": {"path": str(data), "embedding_model": "hashing"},
        "server": {"port": port},
        "prefect": {"port": prefect_port, "repair_interval_seconds": 60},
    }))
    llm_args = ["offline-llm", "--port", str(llm_port), "--latency-ms", "700"]
    with amaris_process(llm_args, tmp_path, f"http://127.0.0.1:{llm_port}/v1/models",
                        tmp_path / "llm.log"):
        server = start_serve(config, tmp_path, url, tmp_path / "serve.log")
        try:
            deadline = time.monotonic() + 120
            while len(children(server.pid)) < 2:  # the Prefect server and the repair worker
                assert time.monotonic() < deadline
                time.sleep(0.1)
            kids = children(server.pid)
            ui = run_amaris(["ui", "--config", str(config)], tmp_path)
            assert ui.stdout.strip() == f"http://127.0.0.1:{prefect_port}", ui.stderr
            for i in range(12):
                assert score(url, 1, i).status_code == 200
            assert httpx.post(f"{url}/complete", timeout=10).json() == {"status": "complete"}
            while calls(data, "analyzer", 1) < 1:  # the flow runs; 12 analyses take > 8 s
                assert time.monotonic() < deadline
                time.sleep(0.1)
            in_flight: list[int] = []
            request = threading.Thread(target=lambda: in_flight.append(
                score(url, 2, 0).status_code))
            request.start()
            time.sleep(0.3)  # the judge takes 0.7 s: the request is in flight
            server.send_signal(signal.SIGTERM)
            request.join(30)
            assert in_flight == [200]  # finished, not cut off
            assert server.wait(45) == 0
            time.sleep(1)
            assert [k for k in kids if alive(k)] == []  # no orphaned Prefect server
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{prefect_port}/api/health", timeout=2)
            assert run_amaris(["ui", "--config", str(config)], tmp_path).returncode == 1

            # restart: step 1 was left completing and resumes
            server = start_serve(config, tmp_path, url, tmp_path / "serve.log")
            done = httpx.get(f"{url}/rubric_status/wait", params={"step": 1, "timeout": 180},
                             timeout=200).json()
            assert done["status"] == "updated", done
            assert done["scopes"]["global"]["rollouts"] == 12
        finally:
            stop(server)
