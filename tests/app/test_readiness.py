"""``amaris.readiness.wait_ok``: the wait for a child process's HTTP server, one client (one
connection kept open) for all its polls."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from amaris.app.running import free_port
from amaris.readiness import wait_ok
from tests.support.local_http import serving


@contextmanager
def starting_server(not_ready: int) -> Iterator[tuple[str, list[int]]]:
    """A server answering 503 ``not_ready`` times, then 200; yields its URL and the client
    port of each request (HTTP/1.1: a connection kept open keeps its port)."""
    ports: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            ports.append(self.client_address[1])
            self.send_response(503 if len(ports) <= not_ready else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield f"{url}/healthz", ports


def test_the_wait_ends_at_the_first_200_over_one_connection() -> None:
    checks: list[None] = []
    with starting_server(not_ready=3) as (url, ports):
        assert wait_ok(url, lambda: checks.append(None), timeout=60, interval=0.01)
    assert len(ports) == 4 and len(set(ports)) == 1, ports
    assert len(checks) == 4  # the process checked before each poll


def test_nothing_listening_is_false_once_the_time_is_up() -> None:
    port = free_port()
    pauses: list[float] = []
    assert not wait_ok(f"http://127.0.0.1:{port}/", lambda: None, 0.3, 0.05, pauses.append)
    assert pauses and set(pauses) == {0.05}


def test_a_process_that_died_ends_the_wait() -> None:
    def dead() -> None:
        raise RuntimeError("exited with 1")

    with starting_server(not_ready=0) as (url, ports), pytest.raises(RuntimeError, match="exited"):
        wait_ok(url, dead, timeout=60, interval=0.01)
    assert ports == []
