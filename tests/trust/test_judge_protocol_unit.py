"""The verdict scale and what the judge must answer (amaris/scoring/judge_protocol.py),
fixture-free (``--noconftest``: the mutation run of ``judge_protocol``): scores
on the scale's integers only, reasons clipped and made storable, one verdict per judged
criterion (the error naming what is missing, unknown, duplicated), the strict schema, and
the messages (pitfalls told by their weight). tests/scoring/test_scorer.py and
tests/api/test_judge_replies.py take the same answers through the scorer and the app."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.scoring.judge_protocol import (
    MAX_REASON_CHARS,
    JudgeVerdicts,
    Verdict,
    check_ids,
    judge_messages,
    known_verdicts,
    verdicts_schema,
)
from amaris.settings import RegexRule

A1 = Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True)
A2 = Criterion(
    id="A2",
    text="The reply ends with an answer line.",
    weight=0.5,
    is_anchor=True,
    rule=RegexRule(kind="regex", pattern="Answer: "),
)
A3 = Criterion(id="A3", text="The steps are shown.", weight=0.5, is_anchor=True)
R1 = Criterion(id="R1", text="The reply hedges between answers.", weight=-0.5, is_anchor=False)
RUBRIC = RubricVersion(version=3, origin="config", anchors=(A1, A2, A3), adaptive=(R1,))
"""Judged: A1, A3, R1 (A2 is a rule, amaris's to check)."""


def verdicts(*ids: str) -> JudgeVerdicts:
    return JudgeVerdicts(verdicts=[Verdict(id=i, score=2) for i in ids])


def test_the_scale_is_the_integers_0_to_4() -> None:
    assert (SCALE_MIN, SCALE_MAX) == (0, 4)
    for score in range(5):
        assert Verdict.model_validate({"id": "A1", "score": score}).score == score
    for bad in (-1, 5, 2.5, "high", None):
        with pytest.raises(ValidationError):
            Verdict.model_validate({"id": "A1", "score": bad})
    assert Verdict.model_validate({"id": "A1", "score": 3.0}).score == 3  # an integral float


def test_a_reason_is_optional_clipped_and_made_storable() -> None:
    assert Verdict(id="A1", score=1).reason == ""
    whole = "r" * MAX_REASON_CHARS
    assert MAX_REASON_CHARS == 2_000
    assert Verdict(id="A1", score=1, reason=whole).reason == whole
    clipped = Verdict(id="A1", score=1, reason=whole + "s").reason
    assert clipped == whole + "..."
    assert Verdict(id="A1", score=1, reason="bad \ud800 é").reason == "bad \ufffd é"
    # clipped, then made storable: a surrogate past the cut is gone
    assert Verdict(id="A1", score=1, reason=whole + "\ud800").reason == whole + "..."


def test_one_verdict_per_judged_criterion_in_any_order_passes() -> None:
    check = check_ids(RUBRIC)
    check(verdicts("A1", "A3", "R1"))
    check(verdicts("R1", "A1", "A3"))


def test_a_rubric_of_300_judged_criteria_is_checked_by_value() -> None:
    # past 256, two equal lengths are two int objects: compared by value, not identity
    many = tuple(
        Criterion(id=f"A{i}", text=f"Criterion {i}.", weight=1.0, is_anchor=True)
        for i in range(1, 301)
    )
    rubric = RubricVersion(version=1, origin="config", anchors=many)
    check_ids(rubric)(verdicts(*(f"A{i}" for i in range(300, 0, -1))))
    with pytest.raises(ValueError, match=r"missing .'A300'.*duplicated .'A1'."):
        check_ids(rubric)(verdicts("A1", *(f"A{i}" for i in range(1, 300))))


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ((), "(3; the reply has 0); missing ['A1', 'A3', 'R1'], unknown [], duplicated []"),
        (("A1", "A3"), "(3; the reply has 2); missing ['R1'], unknown [], duplicated []"),
        (
            ("A1", "A2", "A3"),  # a rule criterion is not the judge's
            "(3; the reply has 3); missing ['R1'], unknown ['A2'], duplicated []",
        ),
        (
            ("A1", "A1", "R1"),  # as many as expected, one twice
            "(3; the reply has 3); missing ['A3'], unknown [], duplicated ['A1']",
        ),
        (
            ("A1", "A3", "R9"),
            "(3; the reply has 3); missing ['R1'], unknown ['R9'], duplicated []",
        ),
        (
            ("R1", "R1", "A3", "A3", "A1"),
            "(3; the reply has 5); missing [], unknown [], duplicated ['A3', 'R1']",
        ),
    ],
)
def test_a_reply_missing_adding_or_repeating_ids_is_refused_naming_them(
    ids: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError) as caught:
        check_ids(RUBRIC)(verdicts(*ids))
    assert str(caught.value) == f"verdicts must cover each criterion id exactly once {message}"


def test_verdicts_on_unknown_ids_beside_one_per_criterion_pass_and_are_not_read() -> None:
    # A judge without a schema sometimes adds a verdict of its own (SmolLM2: B1); the
    # rubric's criteria each have theirs, so the reply is read without them. A rule
    # criterion's id (A2) is not the judge's: a verdict on it is left out too.
    reply = verdicts("A1", "A2", "A3", "R1", "B1")
    check_ids(RUBRIC)(reply)
    assert [v.id for v in known_verdicts(reply, RUBRIC)] == ["A1", "A3", "R1"]


def test_the_error_names_five_ids_of_a_kind_each_clipped_and_counts_the_rest() -> None:
    # R1 missing: the reply is refused, and the error lists the unknown ids it holds.
    unknown = [f"X{i}" for i in range(7)]
    with pytest.raises(ValueError) as caught:
        check_ids(RUBRIC)(verdicts("A1", "A3", *unknown))
    assert str(caught.value).endswith(
        "unknown ['X0', 'X1', 'X2', 'X3', 'X4'] and 2 more, duplicated []"
    )
    five = [f"Y{i}" for i in range(5)]
    with pytest.raises(ValueError) as caught:
        check_ids(RUBRIC)(verdicts("A1", "A3", *five))
    assert str(caught.value).endswith("unknown ['Y0', 'Y1', 'Y2', 'Y3', 'Y4'], duplicated []")
    forty, long = "z" * 40, "z" * 41
    with pytest.raises(ValueError) as caught:
        check_ids(RUBRIC)(verdicts("A1", "A3", forty, long))
    assert str(caught.value).endswith(f"unknown ['{forty}', '{forty}...'], duplicated []")


def test_the_schema_asks_for_one_verdict_per_id_on_the_scale() -> None:
    schema = verdicts_schema(("A1", "A3", "R1"))
    items = schema["properties"]["verdicts"]
    assert (items["minItems"], items["maxItems"]) == (3, 3)
    props = items["items"]["properties"]
    assert list(props) == ["id", "reason", "score"]  # the reason written before the score
    assert props["id"] == {"type": "string", "enum": ["A1", "A3", "R1"]}
    assert props["score"] == {"type": "integer", "enum": [0, 1, 2, 3, 4]}
    assert items["items"]["required"] == ["id", "reason", "score"]
    assert schema["required"] == ["verdicts"]
    # each call its own copy: one rubric's schema does not leak into another's
    other = verdicts_schema(("A1",))
    assert other["properties"]["verdicts"]["maxItems"] == 1
    assert items["maxItems"] == 3 and props["id"]["enum"] == ["A1", "A3", "R1"]


def test_the_messages_list_the_judged_criteria_pitfalls_by_their_weight() -> None:
    fields = {"input": "What is 6 * 7?", "supplemental_context": "42", "output": "Answer: 42"}
    system, user = judge_messages("You are the judge.", RUBRIC, fields)
    assert system["role"] == "system" and user["role"] == "user"
    assert system["content"].startswith("You are the judge.")
    criteria = [
        {"id": "A1", "text": A1.text, "kind": "requirement"},
        {"id": "A3", "text": A3.text, "kind": "requirement"},  # weight 0.5
        {"id": "R1", "text": R1.text, "kind": "pitfall"},  # weight -0.5
    ]
    assert json.dumps(criteria, ensure_ascii=False) in system["content"]
    assert "A2" not in system["content"]
    rollout = json.dumps(
        {"input": "What is 6 * 7?", "supplemental_context": "42", "output": "Answer: 42"}
    )
    assert rollout in user["content"]
    assert "What is 6 * 7?" not in system["content"]  # byte-identical for every rollout
