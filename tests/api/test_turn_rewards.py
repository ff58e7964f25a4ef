"""A trajectory's reward per assistant turn (``include_turns``), through the real app (Qdrant in
memory): the judge asked for each criterion's turns, the answer's ``turns`` summing to its
score, cached answers, ``/batch_score`` items, what gets none, a trajectory cut to
``scoring.max_field_chars`` by its parts, and the OpenAPI document. The judge is a scripted
provider at the gateway seam (tests/support/scripted_llm.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from amaris.llm.budget import estimate_messages
from amaris.llm.gateway import build_providers
from amaris.llm.providers import Completion
from tests.support.app import in_memory_app
from tests.support.scripted_llm import Call, ScriptedProvider, verdicts
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

RUBRIC: dict[str, Any] = {
    "anchor_rubrics": [
        {"text": "The agent fixes the bug.", "weight": 1.0},
        {"text": "The agent claims a result the outcome contradicts.", "weight": -0.5},
    ],
    "adaptive_rubrics": [{"text": "The agent runs the tests before editing.", "weight": 1.0}],
}
"""A1, the pitfall A2 and R1."""
SCORES = {"A1": 4, "A2": 2, "R1": 2}
SCORE = (1.0 + 0.5 - 0.5 * 0.5) / 2.0
ATTRIBUTED = {"A1": [3, 0, 99], "A2": [5], "R1": []}
"""A1 at the edit (0 is the user's message, 99 none: both dropped), the pitfall at the final
answer, R1 unattributed."""


def judge(call: Call) -> Completion:
    """Verdicts with turns when the rollout lists them (a trajectory), plain otherwise."""
    turns = call.rollout().get("turns")
    entries = []
    for criterion in call.criteria():
        cid = criterion["id"]
        entry: dict[str, Any] = {"id": cid, "reason": "seen", "score": SCORES[cid]}
        if turns is not None:
            entry["turns"] = ATTRIBUTED[cid]
        entries.append(entry)
    return Completion(content=json.dumps({"verdicts": entries}), prompt_tokens=9)


@contextmanager
def serve(tmp_path: Path, **overrides: Any) -> Iterator[tuple[TestClient, ScriptedProvider]]:
    settings = make_settings(tmp_path, **{**RUBRIC, **overrides})
    provider = ScriptedProvider(default=judge)
    app = in_memory_app(settings, providers={**build_providers(settings), "scorer": provider})
    with TestClient(app) as client:
        yield client, provider


def trajectory(rid: str = "t1", result: str = "ok") -> dict[str, Any]:
    """Assistant turns 1, 3 and 5."""
    call = {"id": "c1", "type": "function", "function": {"name": "edit", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": "Running the tests first."},
        {"role": "user", "content": "1 failed"},
        {"role": "assistant", "content": "Editing calc.py.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
        {"role": "assistant", "content": "Fixed; all tests pass."},
    ]
    body = {"id": rid, "messages": messages, "outcome": {"tests_passed": True}}
    return {**body, "finish_reason": "stop"}


def test_the_answer_spreads_the_reward_over_the_turns_the_judge_names(tmp_path: Path) -> None:
    body = {"rollout": trajectory(), "include_turns": True}
    with serve(tmp_path) as (client, provider):
        first = client.post("/score", json=body)
        again = client.post("/score", json=body)
        plain = client.post("/score", json={"rollout": trajectory()})
    assert first.status_code == 200, first.text
    answer = first.json()
    assert answer["score"] == pytest.approx(SCORE)
    turns = answer["turns"]
    assert [t["index"] for t in turns] == [1, 3, 5]
    assert sum(t["reward"] for t in turns) == pytest.approx(SCORE)
    # A1's 1/2 to turn 3; R1's 1/4 over every turn; the pitfall's -1/8 to turn 5
    assert [t["reward"] for t in turns] == pytest.approx([1 / 12, 0.5 + 1 / 12, 1 / 12 - 1 / 8])
    assert [(t["met"], t["broke"]) for t in turns] == [([], []), (["A1"], []), ([], ["A2"])]
    # the judge was asked for turns: the strict schema, and the rollout's assistant turns
    (call,) = provider.calls
    shown: dict[str, Any] = dict(call.rollout())
    assert shown["turns"] == [1, 3, 5]
    assert call.response_format is not None
    schema = call.response_format["json_schema"]
    item = schema["schema"]["properties"]["verdicts"]["items"]
    assert schema["name"] == "TrajectoryVerdicts"
    assert list(item["properties"]) == ["id", "reason", "score", "turns"]
    assert item["properties"]["turns"]["items"]["maximum"] == 1023  # a message index
    # a cached answer keeps the attributions; without include_turns, none
    assert again.json()["cached"] is True and again.json()["turns"] == turns
    assert plain.json()["turns"] is None and plain.json()["score"] == answer["score"]


def test_a_string_rollout_or_an_unscored_one_has_no_turns(tmp_path: Path) -> None:
    string = {"rollout": {"id": "s1", "input": "2+2?", "output": "4"}, "include_turns": True}
    with serve(tmp_path) as (client, provider):
        answer = client.post("/score", json=string).json()
        provider.default = verdicts(("A1", 4))  # misses A2 and R1: invalid twice
        unscored = client.post("/score", json={"rollout": trajectory("t2"), "include_turns": True})
    assert answer["status"] == "scored" and answer["turns"] is None
    assert "turns" not in provider.calls[0].rollout()
    assert provider.calls[0].response_format["json_schema"]["name"] == "JudgeVerdicts"  # type: ignore[index]
    assert unscored.json()["status"] == "unscored" and unscored.json()["turns"] is None


def test_batch_items_ask_for_their_own_turns(tmp_path: Path) -> None:
    items = [
        {"rollout": trajectory("b1"), "include_turns": True},
        {"rollout": trajectory("b2", result="edited")},
    ]
    with serve(tmp_path) as (client, _):
        r = client.post("/batch_score", json={"items": items})
    assert r.status_code == 200, r.text
    first, second = r.json()["results"]
    assert [t["index"] for t in first["turns"]] == [1, 3, 5]
    assert sum(t["reward"] for t in first["turns"]) == pytest.approx(first["score"])
    assert second["turns"] is None


def test_a_long_trajectory_is_cut_to_the_field_limit_by_its_parts(tmp_path: Path) -> None:
    body = trajectory(result="r" * 6_000)
    overrides = {"scoring.max_field_chars": 2_000, "scoring.oversize": "truncate"}
    with serve(tmp_path, **overrides) as (client, provider):
        answer = client.post("/score", json={"rollout": body, "include_turns": True}).json()
    assert answer["status"] == "scored" and answer["truncated"] == ["rollout.messages"]
    output = provider.calls[0].rollout()["output"]
    assert len(output) <= 2_000
    # the one long tool result cut in its middle, every message and the outcome kept
    for header in ("[1] assistant: ", "[2] user: ", "[3] assistant: ", "[4] tool result for c1: "):
        assert header in output
    assert "r\n  [... truncated by amaris ...]\n  r" in output  # inside its message
    assert output.endswith(
        'Fixed; all tests pass.\noutcome: {"tests_passed": true}\nfinish reason: stop'
    )
    assert "    call c1: edit({})" in output


def test_a_trajectory_over_the_judges_window_is_cut_by_its_parts(tmp_path: Path) -> None:
    body = trajectory()
    call = body["messages"][3]["tool_calls"][0]
    for i in range(40):  # forty more turns, each a call and its result
        step = {**call, "id": f"k{i}"}
        body["messages"][5:5] = [
            {"role": "assistant", "content": f"try {i} " + "t" * 200, "tool_calls": [step]},
            {"role": "tool", "tool_call_id": f"k{i}", "content": "r" * 200},
        ]
    window = {"agents.scorer.context_window": 3_000, "agents.scorer.max_tokens": 200}
    with serve(tmp_path, **window) as (client, provider):
        answer = client.post("/score", json={"rollout": body, "include_turns": True}).json()
    assert answer["status"] == "scored" and answer["truncated"] == ["rollout.messages"]
    (call_made,) = provider.calls
    assert estimate_messages(call_made.messages) <= 3_000 - 200
    output = call_made.rollout()["output"]
    assert "elided: " in output and output.endswith("finish reason: stop")
    assert "[1] assistant: Running the tests first." in output  # the ends stay
    assert "[85] assistant: Fixed; all tests pass." in output
    assert [t["index"] for t in answer["turns"]] == [1, 3, *range(5, 85, 2), 85]


def test_a_long_trajectory_is_refused_by_default(tmp_path: Path) -> None:
    with serve(tmp_path, **{"scoring.max_field_chars": 2_000}) as (client, provider):
        r = client.post("/score", json={"rollout": trajectory(result="r" * 6_000)})
    assert r.status_code == 413, r.text
    assert "rollout.messages" in r.text and provider.calls == []


def test_the_openapi_document_shows_include_turns_and_turns(tmp_path: Path) -> None:
    with serve(tmp_path) as (client, _):
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
    asked = schemas["ScoreRequest"]["properties"]["include_turns"]
    assert asked["type"] == "boolean" and asked["default"] is False
    assert "turns" in asked["description"]
    turns = schemas["ScoreResponse"]["properties"]["turns"]
    assert turns["anyOf"][0]["items"] == {"$ref": "#/components/schemas/TurnReward"}
    assert "include_turns" in turns["description"]
    assert list(schemas["TurnReward"]["properties"]) == ["index", "reward", "met", "broke"]
