"""The reward per objective on the trainer's side: :class:`RewardClient`'s answers against a
real uvicorn server (offline judge), and one ``/get_reward`` exchange keeping each sample's
vector across a retry (:class:`amaris.client.rewards.Exchange`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from amaris import RewardClient
from amaris.client.rewards import Exchange
from tests.support.app import in_memory_app
from tests.support.fake_llm import serve_in_thread
from tests.support.settings import make_settings

ROLLOUT = {"id": "r1", "input": "What is 2 + 2?", "output": "4.", "supplemental_context": "4"}
META = {"current_step": 1}
RIGHT = {"anchors": 1.0, "adaptive": None, "A1": 1.0}
"""The default rubric (one anchor, no adaptive criterion), the answer right."""
WRONG = {"anchors": 0.0, "adaptive": None, "A1": 0.0}


async def test_the_clients_answers_carry_the_vectors(tmp_path: Path) -> None:
    body = {"query": ["What is 2 + 2? 4.", "What is 2 + 2? 5."], "prompts": ["What is 2 + 2? "] * 2}
    with serve_in_thread(in_memory_app(make_settings(tmp_path))) as url:
        async with RewardClient(url, timeout=10) as client:
            detailed = await client.score_detailed_async(ROLLOUT, META)
            results = await client.batch_score_async(
                [
                    {"rollout": {**ROLLOUT, "id": "b1", "output": "5."}, "metadata": META},
                    {"rollout": {**ROLLOUT, "id": "b2", "output": 7}, "metadata": META},
                ]
            )
            rewards = await client.get_rewards_async({**body, "labels": ["4", "4"]}, step=1)
            blocking = await asyncio.to_thread(client.get_rewards, {**body, "labels": ["4", "4"]})
    assert detailed.rewards == RIGHT
    assert [r.rewards for r in results] == [WRONG, None]  # the second item is invalid
    assert rewards.rewards == [1.0, 0.0]
    assert rewards.reward_vectors == [RIGHT, WRONG]
    assert blocking.reward_vectors == [RIGHT, WRONG]


def answer(code: int, rewards: list[float | None], vectors: list[Any] | None) -> httpx.Response:
    data: dict[str, Any] = {
        "rewards": rewards,
        "statuses": ["scored" if r is not None else "unscored" for r in rewards],
        "extra_logs": {"amaris_rubric_version": [1] * len(rewards)},
        "step": 3,
    }
    if vectors is not None:
        data["reward_vectors"] = vectors
    return httpx.Response(code, json=data, headers={"Retry-After": "0"})


def test_an_exchange_keeps_each_samples_vector_across_a_retry() -> None:
    exchange = Exchange({"query": ["q0", "q1"], "prompts": ["p0", "p1"]}, None, 60.0)
    assert exchange.result.reward_vectors is None
    exchange.receive(answer(503, [0.5, None], [{"anchors": 0.5}, None]))
    assert exchange.result.reward_vectors == [{"anchors": 0.5}, None]
    # Only the unscored sample is sent again; its vector lands at its own index.
    assert exchange.request() == ({"query": ["q1"], "prompts": ["p1"]}, 3)
    exchange.receive(answer(200, [0.25], [{"anchors": 0.25}]))
    assert exchange.result.rewards == [0.5, 0.25]
    assert exchange.result.reward_vectors == [{"anchors": 0.5}, {"anchors": 0.25}]


def test_a_server_without_vectors_leaves_them_none() -> None:
    exchange = Exchange({"query": ["q0"], "prompts": ["p0"]}, None, 60.0)
    exchange.receive(answer(200, [1.0], None))
    assert (exchange.result.rewards, exchange.result.reward_vectors) == ([1.0], None)
