"""The Prefect server ``amaris serve`` starts: credentials, origins, Host, and the
repair deployment, which must never hand the server's key to another address.

The attack this guards against (issue 11): any local process, or a web page in a
browser on the machine, asked the Prefect server for a run of the repair deployment
with ``api_url`` pointing at its own listener, which then received
``Authorization: Bearer <server key>``.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import stat
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
from tests.fake_llm import free_port
from tests.procs import amaris_process, run_amaris

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

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Record)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


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


def test_prefect_server_needs_credentials_and_repair_runs_cannot_leak_the_key(
    tmp_path: Path,
) -> None:
    port, prefect_port = free_port(), free_port()
    data = tmp_path / "data"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(data), "embedding_model": "hashing"},
                "server": {"port": port, "api_key": KEY},
                "prefect": {"port": prefect_port, "repair_interval_seconds": 3600},
            }
        )
    )
    origin = f"http://127.0.0.1:{prefect_port}"
    api = f"{origin}/api"
    with (
        listener() as (evil, received),
        amaris_process(
            ["serve", "--config", str(config)],
            tmp_path,
            f"http://127.0.0.1:{port}/healthz",
            tmp_path / "serve.log",
        ),
    ):
        deadline = time.monotonic() + 180
        # the Prefect home: <data>/prefect, unless PREFECT_HOME says otherwise (as in tests)
        home = Path(os.environ.get("PREFECT_HOME") or data / "prefect")
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
        ui = run_amaris(["ui", "--config", str(config)], tmp_path)
        assert ui.returncode == 0, ui.stderr
        assert ui.stdout.strip() == origin
        assert str(secret_file) in ui.stderr
        assert secret not in ui.stdout + ui.stderr
        recorded = (home / "amaris-server.json").read_text()
        assert secret not in recorded
        repair = run_amaris(["repair", "--config", str(config)], tmp_path)
        assert (repair.returncode, repair.stdout.strip()) == (0, "no failed steps"), repair.stderr

    # 6. Neither secret is in any log amaris, its Prefect server or the repair worker wrote.
    logs = [
        tmp_path / "serve.log",
        home / "server.log",
        home / "repair-worker.log",
        *sorted(data.rglob("*.jsonl")),
    ]
    for path in logs:
        text = path.read_text(errors="replace")
        assert KEY not in text, path
        assert secret not in text, path
        assert secret.partition(":")[2] not in text, path
