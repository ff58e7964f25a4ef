"""The master-key pre-check: degenerate replies get the floor, unjudged; short answers pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from amaris.trust.precheck import degenerate, normalise
from tests.support.api import counters, verdicts
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.master_keys import MASTER_KEYS, PROMPT, REFERENCE, SHORT_ANSWERS
from tests.support.settings import llm_settings, make_settings


@pytest.mark.parametrize("reply", MASTER_KEYS)
def test_every_master_key_is_degenerate(reply: str) -> None:
    found = degenerate(reply, PROMPT, REFERENCE)
    assert found is not None
    assert found.reason().startswith(f"degenerate_reply: {found.kind} (")


@pytest.mark.parametrize("reply", SHORT_ANSWERS)
def test_short_answers_are_not_degenerate(reply: str) -> None:
    assert degenerate(reply, PROMPT, REFERENCE) is None
    assert degenerate(reply, PROMPT) is None


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        ("", "empty"),
        ("  \n", "empty"),
        (":", "no_content"),
        ("Solution", "opener"),
        ("Let's solve this problem step by step.", "opener"),
        (PROMPT, "prompt_echo"),
        (f"Question: {PROMPT} Solution:", "prompt_echo"),
    ],
)
def test_kinds(reply: str, kind: str) -> None:
    found = degenerate(reply, PROMPT)
    assert found is not None and found.kind == kind


def test_a_reply_equal_to_the_reference_is_never_degenerate() -> None:
    # "Solution" is the right translation of "Solución": the reference says so.
    assert degenerate("Solution", "Translate 'solución' into English.", "Solution") is None
    assert degenerate("Solution.", "Translate 'solución'.", "Answer: solution") is None
    assert degenerate("Solution", "Translate 'solución' into English.") is not None


def test_the_prompt_with_an_answer_is_not_an_echo() -> None:
    assert degenerate(f"{PROMPT} Answer: 42", PROMPT) is None
    assert degenerate("What is 6 * 70?", "What is 6 * 7?") is None


def test_normalise_drops_case_punctuation_and_markup() -> None:
    assert normalise("**Let\u2019s  Solve:** this!") == "lets solve this"
    assert normalise("解答\uff1a") == "解答"


def test_master_keys_get_the_floor_through_the_app_without_a_judge_call(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    items = [
        {
            "rollout": {
                "id": f"k{i}",
                "input": PROMPT,
                "output": reply,
                "supplemental_context": REFERENCE,
            }
        }
        for i, reply in enumerate(MASTER_KEYS)
    ]
    with serve(llm_settings(tmp_path, fake_llm)) as client:
        results = client.post(
            "/batch_score", json={"items": items, "include_breakdown": True}
        ).json()["results"]
        seen = counters(client)
        stored = client.get("/steps/0/rollouts").json()["records"]
    assert [r["score"] for r in results] == [0.0] * len(MASTER_KEYS)
    assert {r["status"] for r in results} == {"scored"}
    assert all(r["reason"].startswith("degenerate_reply: ") for r in results)
    assert all(r["breakdown"] == [] for r in results)
    assert fake_llm.requests == []
    assert seen["degenerate"] == len(MASTER_KEYS)
    assert sorted(r["reason"] for r in stored) == sorted(r["reason"] for r in results)


def test_short_answers_reach_the_judge(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(*(verdicts(A1=4) for _ in SHORT_ANSWERS))
    items = [
        {
            "rollout": {
                "id": f"s{i}",
                "input": PROMPT,
                "output": reply,
                "supplemental_context": REFERENCE,
            }
        }
        for i, reply in enumerate(SHORT_ANSWERS)
    ]
    with serve(llm_settings(tmp_path, fake_llm)) as client:
        results = client.post("/batch_score", json={"items": items}).json()["results"]
    assert [r["score"] for r in results] == [1.0] * len(SHORT_ANSWERS)
    assert [r["reason"] for r in results] == [None] * len(SHORT_ANSWERS)
    assert len(fake_llm.requests) == len(SHORT_ANSWERS)


def test_floor_is_configurable_and_the_check_can_be_turned_off(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    rollout = {"id": "r1", "input": PROMPT, "output": "Solution", "supplemental_context": "42"}
    floored = make_settings(tmp_path / "a", **{"scoring.precheck.floor": 0.1})
    with serve(floored) as client:
        r = client.post("/score", json={"rollout": rollout})
    assert (r.json()["score"], r.json()["reason"]) == (
        0.1,
        "degenerate_reply: opener (only a reasoning opener or answer label: 'Solution')",
    )
    # Off: the reply goes to the judge, whose (gullible, scripted) verdict is the reward.
    fake_llm.push(verdicts(A1=4))
    off = llm_settings(tmp_path / "b", fake_llm, **{"scoring.precheck.enabled": False})
    with serve(off) as client:
        r = client.post("/score", json={"rollout": rollout})
    assert (r.json()["score"], r.json()["reason"]) == (1.0, None)
    assert len(fake_llm.requests) == 1
