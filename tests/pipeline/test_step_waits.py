"""``GET /rubric_status/wait`` is bounded: ``server.max_wait_seconds``, 404 for an unknown
step, no waiter left when the client disconnects, none holding a shutdown; the client asks
again while ``pending``."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from amaris import RewardClient
from amaris.app.running import free_port
from amaris.app.serve import WaitEndingServer
from amaris.app.wiring import build_services, create_app
from amaris.client import WaitAnswer
from tests.support.app import in_memory_app
from tests.support.fake_llm import serve_in_thread
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

DEADLINE_S = 60.0
"""Generous bound of every wait for a condition below (never part of an assertion)."""


def rollout(rid: str) -> dict[str, Any]:
    return {"id": rid, "input": "What is 2+2?", "output": f"4 ({rid})", "supplemental_context": "4"}


def waiters(url: str) -> int:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("amaris_step_waiters "):
            return int(float(line.split()[1]))
    raise AssertionError("no amaris_step_waiters gauge")


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def open_wait(url: str, query: str) -> socket.socket:
    """A raw HTTP/1.1 ``GET /rubric_status/wait?<query>``, left unanswered."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
    sock.sendall(f"GET /rubric_status/wait?{query} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return sock


def test_unknown_step_answers_404_at_once(offline_client: TestClient) -> None:
    response = offline_client.get("/rubric_status/wait", params={"step": 7})
    assert response.status_code == 404
    detail = response.json()["detail"]
    assert [d["field"] for d in detail] == ["step"]
    assert "step 7 is unknown" in detail[0]["message"]
    # no step given and none started: nothing to wait for
    assert offline_client.get("/rubric_status/wait").json()["status"] == "unchanged"


def test_a_wait_is_capped_by_max_wait_seconds(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, **{"server.max_wait_seconds": 0.2})
    with serve_in_thread(in_memory_app(settings)) as url:
        body = {"rollout": rollout("r1"), "metadata": {"current_step": 1}}
        assert httpx.post(f"{url}/score", json=body, timeout=30).status_code == 200
        for params in ({"step": 1}, {"step": 1, "timeout": 3600}):
            answer = httpx.get(f"{url}/rubric_status/wait", params=params, timeout=DEADLINE_S)
            assert answer.json() == {
                "status": "pending",
                "mode": "global",
                "step": 1,
                "error": None,
                "step_status": "open",
                "scopes": None,
            }


def test_a_wait_ends_when_its_client_disconnects(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)  # the default cap: minutes
    with serve_in_thread(in_memory_app(settings)) as url:
        body = {"rollout": rollout("r1"), "metadata": {"current_step": 1}}
        assert httpx.post(f"{url}/score", json=body, timeout=30).status_code == 200
        clients = [open_wait(url, "step=1"), open_wait(url, "step=1&timeout=3600")]
        until(lambda: waiters(url) == 2, "two waiters")
        clients[0].close()
        until(lambda: waiters(url) == 1, "the first waiter to go")
        clients[1].close()
        until(lambda: waiters(url) == 0, "no waiter left")
        requests = httpx.get(f"{url}/metrics", timeout=10).text
        assert 'route="/rubric_status/wait",status="499"' in requests


@contextmanager
def wait_ending_server(tmp_path: Path) -> Iterator[tuple[str, uvicorn.Server]]:
    """What ``amaris serve`` runs: :class:`WaitEndingServer` with services built first,
    and uvicorn's drain of in-flight requests as long as its own (30 s)."""
    settings = make_settings(tmp_path)
    services = build_services(settings, qdrant_location=":memory:")
    port = free_port()
    config = uvicorn.Config(
        create_app(settings, services=services),
        host="127.0.0.1",
        port=port,
        log_level="error",
        timeout_graceful_shutdown=30,
    )
    server = WaitEndingServer(config, services.coordinator.end_waits)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until(lambda: server.started, "the server to start")
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(DEADLINE_S)
        assert not thread.is_alive()


def test_shutdown_ends_waits_with_pending_instead_of_holding_the_drain(
    tmp_path: Path,
) -> None:
    with wait_ending_server(tmp_path) as (url, server):
        body = {"rollout": rollout("r1"), "metadata": {"current_step": 1}}
        assert httpx.post(f"{url}/score", json=body, timeout=30).status_code == 200
        answers: list[httpx.Response] = []
        waiter = threading.Thread(
            target=lambda: answers.append(
                httpx.get(f"{url}/rubric_status/wait", params={"step": 1}, timeout=DEADLINE_S)
            )
        )
        waiter.start()
        until(lambda: waiters(url) == 1, "the waiter")
        server.should_exit = True
        waiter.join(DEADLINE_S)
        # Answered, not cut off when the drain's 30 s ran out (a 500 then).
        assert [(a.status_code, a.json()["status"]) for a in answers] == [(200, "pending")]


def answered(url: str, status: int) -> int:
    """``/rubric_status/wait`` requests the server answered with ``status``."""
    label = f'route="/rubric_status/wait",status="{status}"'
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("amaris_http_requests_total{") and label in line:
            return int(float(line.split()[-1]))
    return 0


@pytest.mark.usefixtures("prefect_harness")
def test_client_asks_again_while_pending_until_the_step_is_done(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, **{"server.max_wait_seconds": 0.1})
    with serve_in_thread(in_memory_app(settings)) as url:
        client = RewardClient(url, timeout=30)
        assert asyncio.run(client.score_async(rollout("r1"), {"current_step": 1})) == 1.0
        with pytest.raises(TimeoutError):
            client.rubric_updated(step=1, timeout=0.3)
        with pytest.raises(TimeoutError):
            asyncio.run(RewardClient(url).rubric_updated_async(step=1, timeout=0.3))
        before = answered(url, 200)
        outcome: list[WaitAnswer] = []
        waiter = threading.Thread(
            target=lambda: outcome.append(client.rubric_updated(step=1, timeout=DEADLINE_S))
        )
        waiter.start()
        until(lambda: answered(url, 200) >= before + 3, "three pending answers")
        # the reference flow: /complete without a body, then wait without a timeout
        assert client.rollouts_complete() == "complete"
        assert client.rubric_updated().step == 1
        waiter.join(DEADLINE_S)
        assert [(o.status, o.step) for o in outcome] == [("unchanged", 1)]
