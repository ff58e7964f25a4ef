"""The reward per objective (amaris/rubric/reward_vector.py): each criterion's value, and the
anchors' and adaptive criteria's sub-rewards by the scalar reward's own formula."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from amaris.models import CriterionResult
from amaris.rubric.aggregate import aggregate
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.reward_vector import (
    ADAPTIVE,
    ANCHORS,
    criterion_reward,
    floor_vector,
    reward_vector,
)


def verdict(cid: str, weight: float, score: float) -> CriterionResult:
    return CriterionResult(
        id=cid, text=f"{cid} text", weight=weight, is_anchor=cid[0] == "A", verdict=score, reason=""
    )


def test_a_requirement_is_its_verdict_and_a_pitfall_how_far_it_was_avoided() -> None:
    assert [criterion_reward(1.0, v) for v in (0, 1, 4)] == [0.0, 0.25, 1.0]
    assert [criterion_reward(-0.5, v) for v in (0, 1, 4)] == [1.0, 0.75, 0.0]
    assert criterion_reward(2.0, 2.5) == pytest.approx(0.625)  # a mean of samples
    with pytest.raises(ValueError, match="outside"):
        criterion_reward(1.0, 5)


BREAKDOWNS = [
    [verdict("A1", 1.0, 4), verdict("R1", 0.5, 2), verdict("R2", -0.5, 3)],
    [verdict("A1", 2.0, 1), verdict("A2", -1.0, 4), verdict("R4", 1.0, 4)],
    # the adaptive criteria are pitfalls only: aggregate's fallback formula
    [verdict("A1", 1.0, 3), verdict("R1", -1.0, 1), verdict("R3", -3.0, 0)],
    # the anchors' pitfall outweighs what they earned: clamped at 0
    [verdict("A1", 1.0, 2), verdict("A2", -2.0, 4), verdict("R1", 1.0, 4)],
]


@pytest.mark.parametrize("breakdown", BREAKDOWNS)
def test_sub_rewards_are_aggregate_over_each_kind_of_criterion(
    breakdown: list[CriterionResult],
) -> None:
    vector = reward_vector(breakdown)
    anchors = [c for c in breakdown if c.is_anchor]
    adaptive = [c for c in breakdown if not c.is_anchor]
    assert vector[ANCHORS] == aggregate([c.weight for c in anchors], [c.verdict for c in anchors])
    assert vector[ADAPTIVE] == aggregate(
        [c.weight for c in adaptive], [c.verdict for c in adaptive]
    )
    assert list(vector) == [ANCHORS, ADAPTIVE, *(c.id for c in breakdown)]
    for c in breakdown:
        assert vector[c.id] == criterion_reward(c.weight, c.verdict)
    assert all(value is not None and 0.0 <= value <= 1.0 for value in vector.values())


def test_the_sub_rewards_differ_where_the_kinds_disagree() -> None:
    vector = reward_vector(BREAKDOWNS[3])
    assert vector[ANCHORS] == 0.0  # (0.5 - 2) / 1 clamped
    assert vector[ADAPTIVE] == 1.0
    assert vector["A2"] == 0.0  # the pitfall fully present
    assert vector["R1"] == 1.0


def test_without_adaptive_criteria_adaptive_is_null_and_anchors_is_the_reward() -> None:
    breakdown = [verdict("A1", 1.0, 3), verdict("A2", -0.5, 2)]
    vector = reward_vector(breakdown)
    assert vector == {ANCHORS: pytest.approx(0.5), ADAPTIVE: None, "A1": 0.75, "A2": 0.5}
    assert vector[ANCHORS] == aggregate([1.0, -0.5], [3, 2])


def test_without_anchors_anchors_is_null() -> None:
    assert reward_vector([verdict("R1", 1.0, 4)]) == {ANCHORS: None, ADAPTIVE: 1.0, "R1": 1.0}


def test_a_floored_reply_gets_the_floor_on_every_key() -> None:
    anchor = Criterion(id="A1", text="Correct.", weight=1.0, is_anchor=True)
    pitfall = Criterion(id="R2", text="Hedges.", weight=-1.0, is_anchor=False)
    rubric = RubricVersion(version=3, origin="updater", anchors=(anchor,), adaptive=(pitfall,))
    assert floor_vector(rubric, 0.1) == {ANCHORS: 0.1, ADAPTIVE: 0.1, "A1": 0.1, "R2": 0.1}
    bare = rubric.model_copy(update={"adaptive": ()})
    assert floor_vector(bare, 0.0) == {ANCHORS: 0.0, ADAPTIVE: None, "A1": 0.0}


@pytest.mark.parametrize("name", [ANCHORS, ADAPTIVE])
def test_no_criterion_id_can_be_a_fixed_key(name: str) -> None:
    with pytest.raises(ValidationError, match="pattern"):
        Criterion(id=name, text="x", weight=1.0, is_anchor=False)
