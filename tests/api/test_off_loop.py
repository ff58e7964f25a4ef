"""The text work of a long rollout runs off the event loop.

Linear in time is still a stall of the loop on 100 KB: the pre-check, the rule criteria,
the scorer's messages and the offline judge. Each is spied on where the scoring path calls
it (the spy calls the real function): on a 100 KB reply, while it works, a coroutine on the
event loop runs to completion (the loop is serving); on a short reply, it runs inline (a
thread hop would cost more). The assertions are on the order of events and the thread,
never on durations.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from qdrant_client import QdrantClient

import amaris.llm.providers
import amaris.scoring.reward
import amaris.scoring.scorer
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway
from amaris.llm.providers import OfflineProvider
from amaris.models import ScoreRequest
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.reward import reward_of
from amaris.scoring.scorer import Scorer
from amaris.settings import ExactRule, load_settings
from tests.support.degenerate import QUESTION, REFERENCE, mixed
from tests.support.scripted_llm import scorer_prompt

WATCHDOG_S = 60.0
"""How long a spied call waits for the loop to serve before it gives up (a failure bound)."""

A1 = Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True)
A2 = Criterion(
    id="A2",
    text="The final answer equals the reference.",
    weight=0.5,
    is_anchor=True,
    rule=ExactRule(kind="exact"),
)
RUBRIC = RubricVersion(version=1, origin="config", anchors=(A1, A2))

SEAMS = [
    (amaris.scoring.reward, "degenerate"),
    (amaris.scoring.scorer, "rule_results"),
    (amaris.scoring.scorer, "judge_messages"),
    (amaris.llm.providers, "respond"),
]


def request(output: str) -> ScoreRequest:
    rollout = {"id": "r1", "input": QUESTION, "output": output, "supplemental_context": REFERENCE}
    return ScoreRequest.model_validate({"rollout": rollout, "metadata": {"current_step": 1}})


@pytest.fixture
async def scorer() -> AsyncIterator[Scorer]:
    settings = load_settings(None)
    qdrant = QdrantClient(":memory:")
    store = RubricStore(qdrant, "rubrics", None)
    llm = LLMGateway(settings, {"scorer": OfflineProvider()}, CallLog(None))
    yield Scorer(settings.scoring, llm, store, scorer_prompt(settings))
    await llm.close()
    qdrant.close()


def on_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Spy:
    """Wraps a function of the scoring path: records where it runs, and off the loop holds
    the call until a coroutine on the loop has run."""

    def __init__(self, func: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> None:
        self.func, self.loop = func, loop
        self.events: list[str] = []
        self.threads: set[str] = set()
        self.started = asyncio.Event()
        self.served = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if on_loop_thread():
            self.events.append("ran on the loop")
            return self.func(*args, **kwargs)
        self.events.append("started in a thread")
        self.threads.add(threading.current_thread().name.rsplit("_", 1)[0])
        self.loop.call_soon_threadsafe(self.started.set)
        result = self.func(*args, **kwargs)
        if self.served.wait(WATCHDOG_S):
            self.events.append("finished")
        return result

    async def serve(self) -> None:
        """A coroutine of the loop: runs once the spied call has started."""
        await self.started.wait()
        self.events.append("the loop served")
        self.served.set()


@pytest.mark.parametrize(("module", "name"), SEAMS, ids=[name for _, name in SEAMS])
async def test_a_100_kb_reply_is_scored_while_the_loop_serves(
    scorer: Scorer, monkeypatch: pytest.MonkeyPatch, module: Any, name: str
) -> None:
    spy = Spy(getattr(module, name), asyncio.get_running_loop())
    monkeypatch.setattr(module, name, spy)
    server = asyncio.create_task(spy.serve())
    result = await reward_of(scorer, request(mixed(100_000)), RUBRIC)
    server.cancel()
    assert result.status == "scored"
    assert spy.events == ["started in a thread", "the loop served", "finished"]
    # On amaris's one text thread, not the loop's default executor (six threads on two
    # cores, each contending with the loop for the interpreter lock).
    assert spy.threads == {"amaris-text"}


@pytest.mark.parametrize(("module", "name"), SEAMS, ids=[name for _, name in SEAMS])
async def test_a_short_reply_is_scored_on_the_loop(
    scorer: Scorer, monkeypatch: pytest.MonkeyPatch, module: Any, name: str
) -> None:
    spy = Spy(getattr(module, name), asyncio.get_running_loop())
    monkeypatch.setattr(module, name, spy)
    result = await reward_of(scorer, request("The answer is 42."), RUBRIC)
    assert result.status == "scored"
    assert result.score == 1.0
    assert spy.events == ["ran on the loop"]
