"""The contract tests' fixtures: the offline judge served over real HTTP; verl's modules,
model folder, and an amaris whose judge can be made to fail (the verl contract files)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.settings import llm_settings, make_settings
from tests.support.verl_env import DOWN, event_loop, load_verl, save_model


@pytest.fixture(scope="module")
def offline_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """A test module's server (the offline judge, Qdrant in memory) in a thread: its URL and
    services."""
    app = in_memory_app(make_settings(tmp_path_factory.mktemp("offline")))
    with serve_in_thread(app) as url:
        yield url, app.state.services


@pytest.fixture(scope="module")
def verl() -> Iterator[SimpleNamespace]:
    """verl 0.9.1's modules (tests/support/verl_env.py) and the event loop of the reward
    workers a test module builds (a ray actor has one for its life: the rate_limited
    manager keeps class-level limiters bound to it)."""
    modules = load_verl()
    modules.event_loop = event_loop()
    yield modules
    asyncio.set_event_loop(None)
    modules.event_loop.close()


@pytest.fixture(scope="module")
def verl_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The folder verl loads as ``actor_rollout_ref.model.path`` (tokenizer, config, tools)."""
    return save_model(tmp_path_factory.mktemp("verl-model"))


@pytest.fixture
def verl_amaris(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[tuple[str, Any, FakeLLM]]:
    """amaris on uvicorn, judging through the fake LLM; responses holding DOWN fail."""

    def judge(body: dict[str, Any]) -> Reply:
        return Reply(status=500) if DOWN in json.dumps(body) else offline_reply(body)

    fake_llm.default = judge
    settings = llm_settings(
        tmp_path, fake_llm, **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 0}
    )
    app = in_memory_app(settings)
    with serve_in_thread(app) as url:
        yield url, app.state.services, fake_llm
