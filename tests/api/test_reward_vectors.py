"""The reward per objective (``rewards``) on every scored answer, through the real app (Qdrant
in memory): ``/score``, ``/batch_score`` items and ``/get_reward``'s ``reward_vectors``, cached
answers, a degenerate reply floored unjudged, unscored answers and the OpenAPI document.
The judge is a scripted provider at the gateway seam (tests/support/scripted_llm.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from amaris.llm.gateway import build_providers
from amaris.llm.providers import Completion
from amaris.rubric.aggregate import aggregate
from tests.support.app import in_memory_app
from tests.support.scripted_llm import Call, ScriptedProvider, verdicts
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

RUBRIC: dict[str, Any] = {
    "anchor_rubrics": [
        {"text": "The response gives the correct final answer.", "weight": 1.0},
        {"text": "The response contradicts itself.", "weight": -0.5},
    ],
    "adaptive_rubrics": [
        {"text": "The response explains its reasoning steps.", "weight": 0.5},
        {"text": "The response offers several candidate answers.", "weight": -0.5},
    ],
}
"""Anchors A1 and the pitfall A2; adaptive R1 and the pitfall R2."""
GOOD = {"A1": 3, "A2": 2, "R1": 4, "R2": 1}
"""The judge's verdicts on a reply with ``4`` in it; every criterion 0 otherwise."""
EXPECTED = {
    "anchors": 0.5,  # (1 * 0.75 - 0.5 * 0.5) / 1
    "adaptive": 0.75,  # (0.5 * 1.0 - 0.5 * 0.25) / 0.5
    "A1": 0.75,
    "A2": 0.5,  # the pitfall half present: half avoided
    "R1": 1.0,
    "R2": 0.75,
}
SCORE = (0.75 - 0.25 + 0.5 - 0.125) / 1.5
PROMPT = "What is 2+2?"


def judge(call: Call) -> Completion:
    good = "4" in call.rollout()["output"]
    return verdicts(*((c["id"], GOOD[c["id"]] if good else 0) for c in call.criteria()))


@contextmanager
def serve(
    tmp_path: Path, scorer: Any = judge, **overrides: Any
) -> Iterator[tuple[TestClient, ScriptedProvider]]:
    settings = make_settings(tmp_path, **{**RUBRIC, **overrides})
    provider = ScriptedProvider(default=scorer)
    app = in_memory_app(settings, providers={**build_providers(settings), "scorer": provider})
    with TestClient(app) as client:
        yield client, provider


def body(output: str, rid: str = "r1", **extra: Any) -> dict[str, Any]:
    return {"rollout": {"id": rid, "input": PROMPT, "output": output}, **extra}


def unavailable() -> openai.AuthenticationError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    return openai.AuthenticationError(
        "bad key", response=httpx.Response(401, request=request), body=None
    )


def test_score_answers_a_reward_per_objective_cached_answers_the_same(tmp_path: Path) -> None:
    with serve(tmp_path) as (client, provider):
        first = client.post("/score", json=body("2 + 2 = 4"))
        again = client.post("/score", json=body("2 + 2 = 4", include_breakdown=True))
    assert first.status_code == 200, first.text
    answer = first.json()
    assert answer["score"] == pytest.approx(SCORE)
    assert answer["breakdown"] is None  # the vector needs no breakdown
    assert answer["rewards"] == pytest.approx(EXPECTED)
    # By the scalar's own formula, over each kind alone.
    assert answer["rewards"]["anchors"] == aggregate([1.0, -0.5], [3, 2])
    assert answer["rewards"]["adaptive"] == aggregate([0.5, -0.5], [4, 1])
    cached = again.json()
    assert (cached["cached"], len(provider.calls)) == (True, 1)
    assert cached["rewards"] == answer["rewards"]
    assert [c["id"] for c in cached["breakdown"]] == ["A1", "A2", "R1", "R2"]


def test_a_rubric_without_adaptive_criteria_has_adaptive_null(tmp_path: Path) -> None:
    with serve(tmp_path, adaptive_rubrics=[]) as (client, _):
        answer = client.post("/score", json=body("4")).json()
    assert answer["rewards"] == {"anchors": 0.5, "adaptive": None, "A1": 0.75, "A2": 0.5}
    assert answer["score"] == answer["rewards"]["anchors"]


def test_a_degenerate_reply_gets_the_floor_on_every_key(tmp_path: Path) -> None:
    with serve(tmp_path, **{"scoring.precheck.floor": 0.1}) as (client, provider):
        answer = client.post("/score", json=body("...")).json()
        sample = client.post("/get_reward", json={"query": [PROMPT + " !!"], "prompts": [PROMPT]})
    assert answer["reason"].startswith("degenerate_reply: ")
    assert answer["score"] == 0.1
    assert answer["rewards"] == dict.fromkeys(EXPECTED, 0.1)
    assert sample.json()["reward_vectors"] == [answer["rewards"]]
    assert provider.calls == []


@pytest.mark.parametrize("on_failure", ["null", "neutral"])
def test_an_unscored_answer_has_no_vector(tmp_path: Path, on_failure: str) -> None:
    settings: dict[str, Any] = {"scoring.on_failure": on_failure, "gateway.max_attempts": 1}
    if on_failure == "neutral":
        settings["scoring.neutral_score"] = 0.25
    with serve(tmp_path, unavailable(), **settings) as (client, _):
        answer = client.post("/score", json=body("4")).json()
    assert answer["status"] == "unscored"
    assert answer["score"] == (0.25 if on_failure == "neutral" else None)
    # Not even with a neutral score: no criterion was judged.
    assert answer["rewards"] is None


def test_batch_items_carry_their_own_vector(tmp_path: Path) -> None:
    items = [body("4", "b1"), body("5", "b2"), {"rollout": {"id": "b3"}}, body("4", "b4")]
    with serve(tmp_path) as (client, _):
        r = client.post("/batch_score", json={"items": items})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["scored", "scored", "invalid", "scored"]
    assert results[0]["rewards"] == pytest.approx(EXPECTED)
    assert results[1]["rewards"] == {
        "anchors": 0.0,
        "adaptive": 0.0,
        "A1": 0.0,
        "A2": 1.0,  # a pitfall absent: fully avoided
        "R1": 0.0,
        "R2": 1.0,
    }
    assert results[2]["rewards"] is None
    assert results[3]["rewards"] == results[0]["rewards"]


def test_get_reward_answers_a_vector_per_sample_beside_the_scalars(tmp_path: Path) -> None:
    query = {"query": [PROMPT + " 4", PROMPT + " 5"], "prompts": [PROMPT] * 2}
    with serve(tmp_path) as (client, provider):
        first = client.post("/get_reward", json=query).json()
        again = client.post("/get_reward", json={"query": [PROMPT + " 4"], "prompts": [PROMPT]})
        again = again.json()
    assert first["rewards"] == first["scores"] == [pytest.approx(SCORE), 0.0]
    vectors = first["reward_vectors"]
    assert vectors[0] == pytest.approx(EXPECTED)
    assert vectors[1]["anchors"] == vectors[1]["adaptive"] == 0.0
    assert again["extra_logs"]["amaris_cached"] == [1.0]
    assert again["reward_vectors"] == vectors[:1]
    assert len(provider.calls) == 2


@pytest.mark.parametrize(("on_failure", "code"), [("null", 503), ("neutral", 200)])
def test_get_reward_unscored_samples_have_a_null_vector(
    tmp_path: Path, on_failure: str, code: int
) -> None:
    settings: dict[str, Any] = {"scoring.on_failure": on_failure, "gateway.max_attempts": 1}
    if on_failure == "neutral":
        settings["scoring.neutral_score"] = 0.25
    # The first judge call fails, the second succeeds.
    scorer: list[Any] = [unavailable(), judge]
    with serve(tmp_path, lambda call: _next(scorer, call), **settings) as (client, _):
        query = [PROMPT + " 4", PROMPT + " It is 4."]
        r = client.post("/get_reward", json={"query": query, "prompts": [PROMPT] * 2})
    assert r.status_code == code, r.text
    vectors = r.json()["reward_vectors"]
    assert sorted(r.json()["statuses"]) == ["scored", "unscored"]
    assert sorted(vectors, key=lambda v: v is None)[1] is None
    assert [v for v in vectors if v is not None] == [pytest.approx(EXPECTED)]


def _next(answers: list[Any], call: Call) -> Completion:
    answer = answers.pop(0)
    if isinstance(answer, BaseException):
        raise answer
    result: Completion = answer(call)
    return result


def test_the_openapi_document_shows_the_vectors(tmp_path: Path) -> None:
    with serve(tmp_path) as (client, _):
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    rewards = schemas["ScoreResponse"]["properties"]["rewards"]
    assert "'anchors' and 'adaptive'" in rewards["description"]
    vector = rewards["anyOf"][0]
    assert vector["type"] == "object"
    assert vector["additionalProperties"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    assert "reward_vectors" in schemas["GetRewardResponse"]["required"]
    assert "reward_vectors" in schemas["UnscoredBatchResponse"]["properties"]
