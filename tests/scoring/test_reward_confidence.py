"""The cascade's confidence in a rollout's reward (:mod:`amaris.scoring.reward_confidence`):
a doubtful verdict counts only as far as it, with the less confident ones, can move the
reward past the tolerance. Pure function: no conftest fixture."""

from __future__ import annotations

from amaris.models import CriterionResult
from amaris.scoring.reward_confidence import SURE, reward_confidence


def verdict(cid: str, weight: float, value: float, kind: str = "judge") -> CriterionResult:
    return CriterionResult.model_validate(
        {"id": cid, "text": cid, "weight": weight, "is_anchor": False, "verdict": value}
        | {"kind": kind, "reason": ""}
    )


def test_a_doubtful_verdict_that_can_move_the_reward_decides() -> None:
    breakdown = [verdict("A1", 1.0, 4), verdict("R1", -1.0, 0), verdict("R2", -1.0, 0)]
    confidence = {"A1": 0.999, "R1": 0.6, "R2": 0.99}
    # Each can move the reward on its own: the least confident one's.
    assert reward_confidence(breakdown, confidence, 0.05) == 0.6


def test_a_pitfall_on_a_reward_clamped_at_zero_does_not_count() -> None:
    # A pitfall found for sure (R2) takes the reward to 0; whether R1 holds too cannot
    # move it. Only if R2 were wrong as well could it: then R2's confidence is the reward's.
    breakdown = [verdict("A1", 1.0, 4), verdict("R1", -1.0, 2), verdict("R2", -1.0, 4)]
    confidence = {"A1": 0.9999, "R1": 0.4, "R2": 0.998}
    assert reward_confidence(breakdown, confidence, 0.05) == 0.998


def test_small_weights_count_together() -> None:
    # Two light criteria (0.03 of the reward each) cannot move it past 0.05 alone, but
    # together they can: the second one's confidence; the heavy sure one is not reached.
    breakdown = [verdict("A1", 1.0, 4), verdict("S1", 0.03, 4), verdict("S2", 0.03, 4)]
    confidence = {"A1": 1.0, "S1": 0.3, "S2": 0.5}
    assert reward_confidence(breakdown, confidence, 0.05) == 0.5
    assert reward_confidence(breakdown, confidence, 0.07) == 1.0  # A1's


def test_a_reward_no_judged_verdict_can_move_is_sure() -> None:
    # A rule pitfall holds the reward at 0; the judged criterion cannot lift it.
    breakdown = [verdict("A1", 1.0, 2), verdict("X1", -2.0, 4, kind="rule")]
    assert reward_confidence(breakdown, {"A1": 0.2}, 0.05) == SURE
    assert reward_confidence(breakdown, {}, 0.05) is None
