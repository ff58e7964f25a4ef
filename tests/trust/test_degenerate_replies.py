"""Degenerate replies: every family, at 100 KB, in every field, scores.

Through the real app (the offline judge, the default) and at the matchers themselves. The
bound is the watchdog's (a minute, for work of milliseconds): backtracking ``re`` patterns
would run far longer on these replies, so a test fails by it; nothing here times speed.
"""

from __future__ import annotations

from typing import Any

import pytest

from amaris.text.answers import extract_final_answer, find_candidate_answers
from amaris.trust.precheck import degenerate
from tests.support.app import serve
from tests.support.degenerate import ANSWER, FAMILIES, FIELDS, QUESTION, REFERENCE, opener, rollout
from tests.support.settings import make_settings
from tests.support.testclient import TestClient
from tests.support.watchdog import finishes

SIZE = 100_000


def _score(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = finishes(lambda: client.post("/score", json=body))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    settings = make_settings(tmp_path_factory.mktemp("degenerate"))
    with serve(settings) as test_client:
        yield test_client


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        # The pre-check's opener sequence, as a backtracking pattern spells it.
        ("Let's think step by step. " * 26 + "The answer is 42.", 1.0),
        # The trailing "= X" of answer extraction: no number, a wrong answer.
        ("= a" + " " * 5000 + "b", 0.0),
        # The lists of alternatives, 60,000 characters: one answer, 1, wrong.
        ("1, " * 20_000, 0.0),
    ],
    ids=["opener-693", "equation-5k", "list-60k"],
)
def test_replies_that_stall_a_backtracking_regex_score(
    client: TestClient, reply: str, score: float
) -> None:
    body = {"rollout": rollout(f"backtrack-{len(reply)}", "output", reply)}
    result = _score(client, body)
    assert result["status"] == "scored"
    assert result["score"] == score


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_at_100_kb_scores_in_every_field(
    client: TestClient, family: str, field: str
) -> None:
    text = FAMILIES[family](SIZE)
    assert len(text) == SIZE
    body = {"rollout": rollout(f"{family}-{field}", field, text), "include_breakdown": True}
    result = _score(client, body)
    assert result["status"] == "scored"
    assert 0.0 <= result["score"] <= 1.0
    if field == "input":
        # The reply is the right answer whatever the prompt: the offline judge's rule holds.
        assert result["score"] == 1.0


def test_a_100_kb_opener_loop_is_caught_by_the_precheck() -> None:
    loop = "Let's think step by step. " * 3_846
    found = finishes(lambda: degenerate(loop, QUESTION, REFERENCE))
    assert found is not None and found.kind == "opener"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_answer_extraction_finishes_on_every_family(family: str) -> None:
    text = FAMILIES[family](SIZE)
    finishes(lambda: extract_final_answer(text))
    finishes(lambda: find_candidate_answers(text))
    finishes(lambda: degenerate(text, text, text))


def test_the_answer_after_a_100_kb_loop_is_found() -> None:
    # The final answer sits in the tail the extraction reads.
    assert finishes(lambda: extract_final_answer(opener(SIZE))) == "42"
    assert finishes(lambda: find_candidate_answers(opener(SIZE))) == ["42"]
    assert extract_final_answer(ANSWER) == "42"


def test_the_tail_bound_is_the_reply_end() -> None:
    # A boxed answer far before the end is outside the tail: the last number decides.
    far = "\\boxed{7} " + "word " * 2_000 + "so 42"
    assert extract_final_answer(far) == "42"
