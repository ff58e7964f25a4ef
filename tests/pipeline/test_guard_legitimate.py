"""A legitimate update passes the rubric guard: a new user's first two steps, offline judge.

Four prompts, five answers each (right, wrong, sycophantic, hedging, several candidate
answers), real Prefect flows and Qdrant, the offline agents. The analysis flags the three
hacks; the updater adds pitfalls against them; the canary must not take a flagged hack for
an anchor-passing probe (penalising it is the point), and the rubric must move.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amaris.app.wiring import create_app
from tests.support.pipeline_helpers import PROBLEMS, metadata
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

pytestmark = pytest.mark.usefixtures("prefect_harness")

BEHAVIOURS = ("right", "wrong", "sycophantic", "hedging", "candidates")


def answer(behaviour: str, question: str, value: int) -> str:
    return {
        "right": f"{question[8:-1]} = {value}. The answer is {value}.",
        "wrong": f"{question[8:-1]} = {value + 1}. The answer is {value + 1}.",
        "sycophantic": f"Great question! You're absolutely right to ask. The answer is {value}.",
        "hedging": f"I think it might be {value}, but I'm not sure. Maybe {value}, probably.",
        "candidates": f"{value - 1} or {value} or {value + 1}",
    }[behaviour]


def batch(step: int) -> list[dict[str, Any]]:
    return [
        {
            "rollout": {
                "id": f"s{step}-p{p}-{behaviour}",
                "input": question,
                "output": answer(behaviour, question, value),
                "supplemental_context": f"Answer: {value}",
            },
            "metadata": metadata(step),
            "include_breakdown": True,
        }
        for p, (question, value) in enumerate(PROBLEMS[:4])
        for behaviour in BEHAVIOURS
    ]


def run_step(client: TestClient, step: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Score the step's batch, complete it, wait; the mean reward per behaviour and the
    wait's answer."""
    items = batch(step)
    scored = client.post("/batch_score", json={"items": items})
    assert scored.status_code == 200, scored.text
    rewards: dict[str, list[float]] = {b: [] for b in BEHAVIOURS}
    for item, result in zip(items, scored.json()["results"], strict=True):
        assert result["status"] == "scored", result
        rewards[item["rollout"]["id"].rsplit("-", 1)[1]].append(float(result["score"]))
    assert client.post("/complete", json={"step": step}).status_code == 200
    done = client.get("/rubric_status/wait", params={"step": step, "timeout": 120}).json()
    return {b: sum(v) / len(v) for b, v in rewards.items()}, done


def test_pitfalls_against_flagged_hacks_are_published(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, **{"pipeline.rollouts_per_step": None})
    with TestClient(create_app(settings)) as client:
        before, first = run_step(client, 0)
        # the naive rubric pays every hack that states the right answer in full
        assert before["right"] == before["sycophantic"] == before["candidates"] == 1.0
        outcome = first["scopes"]["global"]
        assert outcome["outcome"] == "published", outcome
        assert outcome["canary"]["outcome"] == "passed", outcome
        _, second = run_step(client, 1)
        assert second["scopes"]["global"]["outcome"] in ("published", "unchanged"), second
        rubric = client.get("/rubrics").json()
        assert rubric["version"] > 1
        after, _ = run_step(client, 2)
    assert after["right"] > after["hedging"], after
    assert after["right"] > after["candidates"], after
    assert after["right"] > after["sycophantic"], after
    assert after["right"] > after["wrong"], after
