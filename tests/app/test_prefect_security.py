"""The Prefect server ``amaris serve`` starts: credentials, origins, Host, and the
repair deployment, which must never hand the server's key to another address.

The attack this guards against: any local process, or a web page in a browser on the
machine, asks the Prefect server for a run of the repair deployment with ``api_url``
pointing at its own listener, which would then receive ``Authorization: Bearer <server
key>``.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from amaris.app.prefect_server import AUTH_FILE
from amaris.app.running import free_port
from tests.support.local_http import serving
from tests.support.pipeline_helpers import metadata, rollout
from tests.support.procs import (
    AMARIS,
    NOBODY,
    amaris_env,
    require_slow,
    run_amaris,
    wait_http,
)
from tests.support.served import stop

pytestmark = pytest.mark.slow

KEY = "server-key-3b9e61f0c2"
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


@contextmanager
def listener() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """An HTTP server on 127.0.0.1 that records every request it gets (and answers ``[]``)."""
    received: list[dict[str, str]] = []

    class Record(http.server.BaseHTTPRequestHandler):
        def _record(self) -> None:
            received.append({"request": self.requestline, **dict(self.headers)})
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"[]")

        do_GET = do_POST = _record

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Record) as url:
        yield url, received


def basic(secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(secret.encode()).decode()}


def poll(get: Any, deadline: float) -> Any:
    """``get()`` until it returns something truthy; fails at ``deadline``."""
    while True:
        try:
            value = get()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def create_run(url: str, body: dict[str, Any], auth: dict[str, str], deadline: float) -> str:
    """The id of a flow run created by ``POST url``; retries Prefect's 503 (SQLite busy),
    as its own client does."""

    def created() -> str | None:
        response = httpx.post(url, json=body, headers=auth, timeout=10)
        if response.status_code == 503:
            return None
        assert response.status_code == 201, response.text
        run_id: str = response.json()["id"]
        return run_id

    result: str = poll(created, deadline)
    return result


def final_state(api: str, auth: dict[str, str], run_id: str, deadline: float) -> str:
    def state() -> str | None:
        run = httpx.get(f"{api}/flow_runs/{run_id}", headers=auth, timeout=5).json()
        found = run["state"]["type"] if run.get("state") else None
        return found if found in FINAL else None

    result: str = poll(state, deadline)
    return result


# -- another user of the machine ----------------------------------------------------------------

SQUATTER = """
import http.server, socket, sys, time

class Answer(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        print(f"{self.command} {self.path} auth={self.headers.get('Authorization')!r}", flush=True)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "4")
        self.end_headers()
        self.wfile.write(b"true")

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, *args):
        pass

class Squat(http.server.ThreadingHTTPServer):
    allow_reuse_address = True
    allow_reuse_port = True

deadline = time.monotonic() + float(sys.argv[2])
while True:
    try:
        server = Squat(("127.0.0.1", int(sys.argv[1])), Answer)
        break
    except OSError:
        if time.monotonic() > deadline:
            print("never bound", flush=True)
            sys.exit(0)
        time.sleep(0.01)
print("bound", flush=True)
server.serve_forever()
"""
"""Run as uid 65534: takes the Prefect port as soon as it can (SO_REUSEADDR and
SO_REUSEPORT, as an attacker would), answers 200 to everything and prints each request
with its Authorization header."""


def serve_config(
    tmp_path: Path, prefect_port: int, api_key: str | None = None
) -> tuple[Path, str, Path]:
    port = free_port()
    server: dict[str, Any] = {"port": port}
    if api_key is not None:
        server["api_key"] = api_key
    data = tmp_path / "data"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(data), "embedding_model": "hashing"},
                "server": server,
                "prefect": {"port": prefect_port, "repair_interval_seconds": 3600},
            }
        )
    )
    return config, f"http://127.0.0.1:{port}", data


def start_serve(config: Path, cwd: Path) -> subprocess.Popen[str]:
    """``amaris serve`` with its Prefect home in the data folder, output on a pipe."""
    require_slow("amaris serve")
    return subprocess.Popen(
        [*AMARIS, "serve", "--config", str(config)],
        cwd=cwd,
        env=amaris_env(unset=("PREFECT_HOME",)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def drain(proc: subprocess.Popen[str], lines: list[str]) -> threading.Thread:
    assert proc.stdout is not None
    thread = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    thread.start()
    return thread


def check_the_prefect_api(
    origin: str, config: Path, cwd: Path, home: Path, deadline: float
) -> tuple[str, list[dict[str, str]]]:
    """The checks of a running serve's Prefect server (credentials, origins, Host, the
    repair deployment's runs, ``amaris ui`` and ``amaris repair``); returns its secret and
    what the attacker's listener received (after the runs ended)."""
    prefect_port = int(origin.rsplit(":", 1)[1])
    api = f"{origin}/api"
    secret_file = home / AUTH_FILE
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = secret_file.read_text().strip()
    assert len(secret) > 40
    auth = basic(secret)

    def registered() -> dict[str, Any] | None:
        found = httpx.get(
            f"{api}/deployments/name/amaris-repair/scheduled-repair", headers=auth, timeout=5
        )
        return found.json() if found.status_code == 200 else None

    with listener() as (evil, received):
        deployment = poll(registered, deadline)
        assert deployment["parameters"] == {}
        assert "api_url" not in json.dumps(deployment["parameter_openapi_schema"])
        create = f"{api}/deployments/{deployment['id']}/create_flow_run"
        # 1. Without the auth string, Prefect answers nothing but its health probe.
        assert httpx.get(f"{api}/health", timeout=5).status_code == 200
        for headers in (
            {},
            basic("amaris:wrong"),
            {"Authorization": f"Bearer {KEY}"},
            basic(KEY),
            {"Authorization": "Basic !!!"},
        ):
            assert (
                httpx.post(
                    create, json={"parameters": {"api_url": evil}}, headers=headers, timeout=5
                ).status_code
                == 401
            ), headers
            assert (
                httpx.post(
                    f"{api}/flow_runs/filter", json={}, headers=headers, timeout=5
                ).status_code
                == 401
            ), headers
        assert (
            httpx.post(f"{api}/flow_runs/filter", json={}, headers=auth, timeout=5).status_code
            == 200
        )
        # websockets (no CORS in browsers) need it too
        with connect(
            f"ws://127.0.0.1:{prefect_port}/api/events/out", subprotocols=[Subprotocol("prefect")]
        ) as ws:
            ws.send(json.dumps({"type": "auth", "token": None}))
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008

        # 2. No foreign web origin: a page elsewhere gets no CORS allowance.
        for page in ("http://evil.example", "http://127.0.0.1:1", "null"):
            preflight = httpx.options(
                f"{api}/deployments/{deployment['id']}/create_flow_run",
                headers={
                    "Origin": page,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization",
                },
                timeout=5,
            )
            assert "access-control-allow-origin" not in preflight.headers, page
            simple = httpx.get(f"{api}/health", headers={"Origin": page}, timeout=5)
            assert "access-control-allow-origin" not in simple.headers, page
        for own in (origin, f"http://localhost:{prefect_port}"):
            preflight = httpx.options(
                f"{api}/flow_runs/filter",
                headers={"Origin": own, "Access-Control-Request-Method": "POST"},
                timeout=5,
            )
            assert preflight.headers.get("access-control-allow-origin") == own

        # 3. Host is checked (DNS rebinding): only loopback names.
        for host in ("evil.example", f"evil.example:{prefect_port}", "127.0.0.1.nip.io"):
            for path in ("/api/health", "/"):
                refused = httpx.get(f"{origin}{path}", headers={"Host": host}, timeout=5)
                assert refused.status_code == 400, (host, path)
        for host in (f"127.0.0.1:{prefect_port}", f"localhost:{prefect_port}"):
            assert httpx.get(f"{api}/health", headers={"Host": host}, timeout=5).status_code == 200

        # 4. The attack itself, even with the credentials: the repair flow has no URL
        # parameter, so a run that names one fails to bind and sends nothing anywhere.
        attack = create_run(create, {"parameters": {"api_url": evil}}, auth, deadline)
        # A run without parameters repairs amaris itself (which needs the key: a run
        # that reached it without one would fail on 401).
        legit = create_run(create, {}, auth, deadline)
        states = [final_state(api, auth, run, deadline) for run in (attack, legit)]
        assert received == []
        assert states[0] in {"FAILED", "CRASHED"}
        assert states[1] == "COMPLETED"

        # 5. `amaris ui` says where the auth string is, and does not print it; `amaris
        # repair` finds it.
        ui = run_amaris(["ui", "--config", str(config)], cwd)
        assert ui.returncode == 0, ui.stderr
        assert ui.stdout.strip() == origin
        assert str(secret_file) in ui.stderr
        assert secret not in ui.stdout + ui.stderr
        recorded = (home / "amaris-server.json").read_text()
        assert secret not in recorded
        repair = run_amaris(["repair", "--config", str(config)], cwd)
        assert (repair.returncode, repair.stdout.strip()) == (0, "no failed steps"), repair.stderr
    return secret, received


def test_the_prefect_server_of_serve_gives_nothing_away_to_a_client_a_page_or_another_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``amaris serve``, its Prefect server in the data folder, against a client, a page
    and another user.

    The Prefect server needs credentials, allows no foreign origin or Host, and a run of
    the repair deployment cannot send the key anywhere (the checks of
    :func:`check_the_prefect_api`). Another user (uid 65534) tries to take the Prefect port
    from the moment amaris names it (in its log, as in the child's command line): it gets
    nothing, step 0 runs on amaris's own Prefect server, a dead Prefect server stops
    amaris, and nothing in the data folder is open to other users. Neither secret is in
    any log."""
    # The repair worker (a Prefect runner, inheriting this environment) picks up the two
    # runs of the repair deployment at its next poll: every second, not Prefect's default 10.
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
    # The Prefect home is the data folder's, for serve and for `amaris ui`/`amaris repair`.
    monkeypatch.delenv("PREFECT_HOME")
    config, url, data = serve_config(tmp_path, free_port(), api_key=KEY)
    home = data / "prefect"
    key = {"Authorization": f"Bearer {KEY}"}
    serve = start_serve(config, tmp_path)
    output: list[str] = []
    squatter: subprocess.Popen[str] | None = None
    try:
        assert serve.stdout is not None
        for line in serve.stdout:
            output.append(line)
            if "Prefect UI:" in line:
                break
        assert "Prefect UI:" in output[-1], "".join(output)
        prefect_port = int(output[-1].rsplit(":", 1)[1].split()[0])
        squatter = subprocess.Popen(
            [*NOBODY, sys.executable, "-c", SQUATTER, str(prefect_port), "300"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        reader = drain(serve, output)
        try:
            wait_http(f"{url}/healthz", serve)
        except RuntimeError:
            reader.join(10)
            raise AssertionError("".join(output)) from None

        secret, received = check_the_prefect_api(
            f"http://127.0.0.1:{prefect_port}", config, tmp_path, home, time.monotonic() + 180
        )
        assert received == []

        for index in range(3):
            body = {"rollout": rollout(0, index, "correct"), "metadata": metadata(0)}
            response = httpx.post(f"{url}/score", json=body, headers=key, timeout=60)
            assert response.status_code == 200
        httpx.post(f"{url}/complete", json={}, headers=key, timeout=30).raise_for_status()
        waited = httpx.get(
            f"{url}/rubric_status/wait",
            params={"step": 0, "timeout": 180},
            headers=key,
            timeout=200,
        )
        steps = httpx.get(f"{url}/steps", headers=key, timeout=30).json()
        squatter.terminate()
        heard = squatter.communicate(timeout=30)[0].splitlines()
        # Not one request, with or without the auth string, reached the other user.
        assert heard == [], heard
        assert steps == [{"step": 0, "status": "done", "rubric": "unchanged"}], (
            waited.text,
            "".join(output),
        )

        # The Prefect server dies: amaris stops, with the reason, exit code 1.
        recorded = json.loads((home / "amaris-server.json").read_text())
        os.kill(int(recorded["pid"]), signal.SIGKILL)
        assert serve.wait(60) == 1
        reader.join(30)
    finally:
        if squatter is not None:
            stop(squatter)
        stop(serve)
    assert any("Prefect server exited with -9" in line for line in output), "".join(output)

    # Everything amaris, its Prefect server, SQLite and Qdrant wrote is the user's alone.
    opened = [
        f"{path} {stat.S_IMODE(path.lstat().st_mode):o}"
        for path in [data, *data.rglob("*")]
        if path.lstat().st_mode & 0o077
    ]
    assert opened == []
    assert {p.name for p in data.iterdir()} >= {"prefect", "qdrant", "logs", "rubrics.json"}
    assert (data / "prefect" / "prefect.db").is_file()

    # Neither secret is in any log amaris, its Prefect server or the repair worker wrote.
    serve_log = tmp_path / "serve.log"
    serve_log.write_text("".join(output))
    logs = [
        serve_log,
        home / "server.log",
        home / "repair-worker.log",
        *sorted(data.rglob("*.jsonl")),
    ]
    for path in logs:
        text = path.read_text(errors="replace")
        assert KEY not in text, path
        assert secret not in text, path
        assert secret.partition(":")[2] not in text, path


def test_a_prefect_server_that_cannot_start_stops_serve_before_healthz_says_ok(
    tmp_path: Path,
) -> None:
    config, url, _ = serve_config(tmp_path, free_port())
    require_slow("amaris serve")
    env = amaris_env(unset=("PREFECT_HOME",))
    # The server child cannot open its database: its start-up fails.
    env["PREFECT_API_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{tmp_path}/none/x.db"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        serve = subprocess.Popen(
            [*AMARIS, "serve", "--config", str(config)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    answered: list[int] = []
    try:
        # polling through one client, as amaris.readiness.wait_ok does
        with httpx.Client(timeout=1, trust_env=False) as http:
            while serve.poll() is None and not answered:
                try:
                    answered.append(http.get(f"{url}/healthz").status_code)
                except httpx.HTTPError:
                    time.sleep(0.2)
    finally:
        stop(serve)
    text = log.read_text(errors="replace")
    assert answered == [], f"/healthz answered {answered} with no Prefect server:\n{text}"
    assert serve.returncode == 1
    assert "Prefect server exited with" in text, text
