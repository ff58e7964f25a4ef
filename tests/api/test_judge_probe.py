"""An unreachable judge is visible before the first reward: the service probes each agent's
endpoint in the background from start-up, shows it in ``/healthz`` and logs a warning."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from amaris.app.running import free_port
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient


def judges(client: TestClient, agents: int) -> dict[str, Any]:
    """``/healthz``'s ``judges`` once ``agents`` agents are probed (the probe does not hold
    start-up)."""
    deadline = time.monotonic() + 60
    while True:
        found: dict[str, Any] = client.get("/healthz").json()["judges"]
        if len(found) >= agents or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_dead_endpoint_is_unreachable_in_healthz_before_any_reward(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{"client.default.base_url": dead, "server.probe_judges_seconds": 30},
    )
    caplog.set_level(logging.WARNING, logger="amaris.llm")
    with serve(settings) as client:
        health = client.get("/healthz").json()
        assert health["status"] == "ok"  # the service serves; the judge is what is down
        found = judges(client, 6)
    assert set(found) >= {"scorer", "analyzer", "updater"}
    scorer = found["scorer"]
    assert scorer["reachable"] is False and scorer["since"].endswith("+00:00")
    assert "ConnectionError" in scorer["error"]
    warned = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert any(m.startswith(f"scorer's endpoint {dead} is unreachable") for m in warned), warned


def test_a_live_endpoint_is_reachable(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = llm_settings(tmp_path, fake_llm, **{"server.probe_judges_seconds": 30})
    with serve(settings) as client:
        found = judges(client, 6)
    assert found and all(state["reachable"] and state["error"] is None for state in found.values())
    assert fake_llm.model_requests == 1  # agents on one endpoint: probed once


def test_the_offline_agents_have_no_endpoint_to_probe(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        assert client.get("/healthz").json()["judges"] == {}
