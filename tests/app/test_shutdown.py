"""SIGTERM: in-flight requests finish, running steps stay resumable, children stop; during
start-up too."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from amaris.app.prefect_server import AUTH_FILE
from amaris.app.running import free_port
from amaris.offline.judge import respond
from amaris.sim.judge_server import Reply, create_llm_app
from amaris.sim.wire import ChatRequest
from tests.support.fake_llm import serve_in_thread
from tests.support.pipeline_canary import agent_of
from tests.support.pipeline_helpers import metadata
from tests.support.procs import AMARIS, amaris_env, run_amaris
from tests.support.served import calls, score, start_serve, stop

pytestmark = pytest.mark.slow

WAIT_S = 60.0
"""Generous bound of the waits for the held judge request (never part of an assertion)."""


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


def processes_of(prefect_port: int) -> list[int]:
    """Live processes of an ``amaris serve`` whose Prefect server is on ``prefect_port``:
    that server (its port in its environment: amaris hands it the socket) and the repair
    worker (its client)."""
    server = f"PREFECT_SERVER_API_PORT={prefect_port}".encode()
    client = f"PREFECT_API_URL=http://127.0.0.1:{prefect_port}/api".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (server in environ or client in environ) and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def answers(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def step_run_lines(api: str, auth: httpx.Auth, run: str, message: str) -> list[dict[str, object]]:
    """The log lines ``message`` of the flow runs named ``run`` on the Prefect server at
    ``api``, once there are some (they are sent in batches)."""
    deadline = time.monotonic() + 60
    while True:
        runs = httpx.post(
            f"{api}/flow_runs/filter",
            auth=auth,
            json={"flow_runs": {"name": {"any_": [run]}}},
            timeout=10,
        ).json()
        logs = httpx.post(
            f"{api}/logs/filter",
            auth=auth,
            json={"logs": {"flow_run_id": {"any_": [r["id"] for r in runs]}}, "limit": 200},
            timeout=10,
        ).json()
        found = [line for line in logs if line["message"] == message]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


@pytest.mark.parametrize(
    ("moment", "embedder"),
    [
        ("prefect server spawned", "hashing"),
        ("api answering", "hashing"),
        # MiniLM loads in a thread from the start (seconds): a stop must not wait for it.
        ("api answering", None),
    ],
)
def test_sigterm_during_start_up_exits_0_and_stops_the_children(
    tmp_path: Path, moment: str, embedder: str | None
) -> None:
    port, prefect_port = free_port(), free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(tmp_path / "data"), "embedding_model": embedder},
                "server": {"port": port},
                "prefect": {"port": prefect_port, "repair_interval_seconds": 60},
            }
        )
    )
    with (tmp_path / "serve.log").open("wb") as out:
        server = subprocess.Popen(
            [*AMARIS, "serve", "--config", str(config)],
            cwd=tmp_path,
            env=amaris_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    # One client for the polls: a client per poll builds a TLS context, costly CPU taken
    # from the start-up it waits for (amaris/readiness.py).
    try:
        deadline = time.monotonic() + 120
        with httpx.Client(timeout=2, trust_env=False) as http:
            while not (
                processes_of(prefect_port)
                if moment == "prefect server spawned"
                else answers(http, f"http://127.0.0.1:{port}/healthz")
            ):
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        server.send_signal(signal.SIGTERM)
        # A SIGTERM during start-up ends it at once, without waiting for the Prefect server.
        assert server.wait(45) == 0, (tmp_path / "serve.log").read_text()[-3000:]
        assert processes_of(prefect_port) == []  # stopped before amaris exited
    finally:
        stop(server)


def test_sigterm_drains_requests_stops_children_and_leaves_steps_resumable(
    tmp_path: Path,
) -> None:
    port, prefect_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    probe = "The answer is 42 (shutdown probe)."
    probe_arrived, release_probe = threading.Event(), threading.Event()
    stopped = threading.Event()

    async def judge(body: ChatRequest) -> Reply:
        """The offline judge, 0.7 s a pipeline agent's reply until the first server has
        stopped (the step's 12 analyses take > 8 s: it is still running at the SIGTERM), at
        once after (the resumed step need not be slow) and for the scorer (the step's
        rollouts are only its input); the probe rollout's scoring request is held until the
        test releases it."""
        if probe in json.dumps(body["messages"]):
            probe_arrived.set()
            await asyncio.to_thread(release_probe.wait, WAIT_S)
            return Reply(content=respond(body["messages"]))
        quick = stopped.is_set() or agent_of(dict(body)) == "scorer"
        return Reply(content=respond(body["messages"]), delay_s=0 if quick else 0.7)

    data = tmp_path / "data"
    config = tmp_path / "config.yaml"
    with serve_in_thread(create_llm_app(judge)) as llm:
        config.write_text(
            yaml.safe_dump(
                {
                    "client": {"default": {"base_url": f"{llm}/v1", "api_key": "test"}},
                    "concurrency": {"analyzer": 1},
                    "memory": {"path": str(data), "embedding_model": "hashing"},
                    "server": {"port": port},
                    "prefect": {"port": prefect_port, "repair_interval_seconds": 60},
                }
            )
        )
        log = tmp_path / "serve.log"
        server = start_serve(config, tmp_path, url, log)
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
            assert httpx.post(f"{url}/complete", json={}, timeout=10).json() == {
                "status": "complete"
            }
            while calls(data, "analyzer", 1) < 1:  # the flow runs; 12 analyses take > 8 s
                assert time.monotonic() < deadline
                time.sleep(0.1)
            in_flight: list[int] = []
            body = {
                "rollout": {"id": "probe", "input": "What is 6 * 7?", "output": probe},
                "metadata": metadata(2),
            }
            request = threading.Thread(
                target=lambda: in_flight.append(
                    httpx.post(f"{url}/score", json=body, timeout=WAIT_S).status_code
                )
            )
            request.start()
            assert probe_arrived.wait(WAIT_S), "the probe never reached the judge"
            server.send_signal(signal.SIGTERM)
            # The judge answers once the server drains its requests (uvicorn says so):
            # the request is in flight through the shutdown.
            deadline = time.monotonic() + WAIT_S
            while "Waiting for connections to close" not in log.read_text():
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
            release_probe.set()
            request.join(WAIT_S)
            assert in_flight == [200]  # finished, not cut off
            assert server.wait(45) == 0
            stopped.set()
            deadline = time.monotonic() + 60
            while [k for k in kids if alive(k)]:  # no orphaned Prefect server
                assert time.monotonic() < deadline, [k for k in kids if alive(k)]
                time.sleep(0.1)
            with pytest.raises(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{prefect_port}/api/health", timeout=2)
            assert run_amaris(["ui", "--config", str(config)], tmp_path).returncode == 1

            # restart: step 1 was left completing and resumes
            server = start_serve(config, tmp_path, url, tmp_path / "serve.log")
            done = httpx.get(
                f"{url}/rubric_status/wait", params={"step": 1, "timeout": 180}, timeout=200
            ).json()
            assert done["status"] == "updated", done
            assert done["scopes"]["global"]["rollouts"] == 12
            # amaris's lines for the step are in its Prefect runs' logs
            prefect = run_amaris(["ui", "--config", str(config)], tmp_path).stdout.strip()
            home = Path(os.environ.get("PREFECT_HOME") or data / "prefect")  # the session's
            secret = (home / AUTH_FILE).read_text().strip()
            auth = httpx.BasicAuth(*secret.split(":", 1))  # Prefect's auth string: user:pass
            lines = step_run_lines(
                f"{prefect}/api", auth, "step-1", "step 1: 12 rollouts to analyse in 1 scope(s)"
            )
            assert lines and {line["name"] for line in lines} == {"amaris.pipeline"}
        finally:
            release_probe.set()
            stop(server)
