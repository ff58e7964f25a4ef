"""A trajectory's reward spread over its assistant turns (amaris/scoring/turn_rewards.py), on
fixed verdicts: the turns' rewards sum to the aggregated reward, a criterion's share goes to
the turns it is attributed to (a rule's to the final answer), an unattributed one is spread
over every turn, pitfalls that take more than was given are scaled to take exactly that,
and the judge's indexes that are not assistant messages are dropped."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from amaris.models import CriterionResult, Rollout
from amaris.rubric.aggregate import aggregate
from amaris.scoring.judge_protocol import MAX_ATTRIBUTED_TURNS, TrajectoryVerdicts
from amaris.scoring.turn_rewards import turn_rewards
from amaris.trajectory import Message


def messages() -> list[Message]:
    """Assistant turns at 1, 3 and 5 (4 is a tool result)."""
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    body: dict[str, Any] = {
        "id": "t",
        "messages": [
            {"role": "user", "content": "Fix it."},
            {"role": "assistant", "content": "Looking."},
            {"role": "user", "content": "Go on."},
            {"role": "assistant", "content": "Editing.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "Done."},
        ],
    }
    rollout = Rollout.model_validate(body)
    assert rollout.messages is not None
    return rollout.messages


def verdict(
    cid: str, weight: float, score: float, kind: Literal["judge", "rule"] = "judge"
) -> CriterionResult:
    return CriterionResult(
        id=cid, text=cid, weight=weight, is_anchor=True, verdict=score, kind=kind, reason=""
    )


def reward_of(verdicts: list[CriterionResult]) -> float:
    return aggregate([c.weight for c in verdicts], [c.verdict for c in verdicts])


def by_index(verdicts: list[CriterionResult], attributed: dict[str, list[int]]) -> dict[int, Any]:
    turns = turn_rewards(messages(), reward_of(verdicts), verdicts, attributed)
    assert sum(t.reward for t in turns) == pytest.approx(reward_of(verdicts))
    return {t.index: t for t in turns}


def test_attributed_shares_go_to_their_turns_and_the_rest_is_spread() -> None:
    verdicts = [
        verdict("A1", 1.0, 4),  # share 1/2, to turn 3
        verdict("A2", 1.0, 2),  # share 1/4, to turns 1 and 5
        verdict("R1", -0.5, 4),  # share -1/4, to turn 3
        verdict("R2", -1.0, 0),  # absent: no share
    ]
    turns = by_index(verdicts, {"A1": [3], "A2": [1, 5], "R1": [3], "R2": [5]})
    assert reward_of(verdicts) == pytest.approx(0.5)
    assert [turns[i].reward for i in (1, 3, 5)] == pytest.approx([0.125, 0.25, 0.125])
    assert (turns[1].met, turns[3].met, turns[5].met) == (["A2"], ["A1"], ["A2"])
    # a pitfall that holds is broken at its turns; one that is absent is broken nowhere
    assert (turns[1].broke, turns[3].broke, turns[5].broke) == ([], ["R1"], [])


def test_an_unattributed_criterion_is_spread_over_every_turn_a_rule_goes_to_the_answer() -> None:
    verdicts = [
        verdict("A1", 1.0, 4),  # share 2/3, no attribution
        verdict("A2", 0.5, 4, kind="rule"),  # share 1/3, the final answer's
    ]
    turns = by_index(verdicts, {})
    assert [turns[i].reward for i in (1, 3, 5)] == pytest.approx([2 / 9, 2 / 9, 2 / 9 + 1 / 3])
    assert turns[5].met == ["A2"] and turns[1].met == turns[3].met == []


def test_indexes_that_are_not_assistant_turns_are_dropped() -> None:
    verdicts = [verdict("A1", 1.0, 4), verdict("A2", 1.0, 4)]
    # 0 and 4 are a user's and a tool's; 9 is past the end; 3 given twice counts once
    turns = by_index(verdicts, {"A1": [0, 4, 9, 3, 3], "A2": [0, 4]})
    assert [turns[i].reward for i in (1, 3, 5)] == pytest.approx([0.5 / 3, 0.5 + 0.5 / 3, 0.5 / 3])
    assert turns[3].met == ["A1"] and turns[1].met == []


def test_pitfalls_that_take_more_than_was_given_take_exactly_that() -> None:
    verdicts = [verdict("A1", 1.0, 2), verdict("R1", -2.0, 4)]  # raw 0.5 - 2 < 0
    assert reward_of(verdicts) == 0.0
    turns = by_index(verdicts, {"A1": [1], "R1": [5]})
    assert [turns[i].reward for i in (1, 3, 5)] == pytest.approx([0.5, 0.0, -0.5])
    assert turns[5].broke == ["R1"]


def test_a_rubric_of_pitfalls_alone_spreads_its_base() -> None:
    verdicts = [verdict("R1", -1.0, 4), verdict("R2", -1.0, 0)]
    assert reward_of(verdicts) == pytest.approx(0.5)
    turns = by_index(verdicts, {"R1": [3]})
    assert [turns[i].reward for i in (1, 3, 5)] == pytest.approx([1 / 3, 1 / 3 - 0.5, 1 / 3])


def test_a_reward_no_criterion_made_is_spread_evenly() -> None:
    turns = turn_rewards(messages(), 0.3)
    assert [(t.index, t.met, t.broke) for t in turns] == [(i, [], []) for i in (1, 3, 5)]
    assert [t.reward for t in turns] == pytest.approx([0.1, 0.1, 0.1])


def test_the_judges_turns_are_read_leniently_and_bounded() -> None:
    reply = TrajectoryVerdicts.model_validate(
        {
            "verdicts": [
                {"id": "A1", "reason": "r", "score": 4, "turns": [3, "5", 1.0, True, -2, 3, None]},
                {"id": "A2", "reason": "r", "score": 2, "turns": "all"},
                {"id": "A3", "reason": "r", "score": 1},
                {"id": "A4", "reason": "r", "score": 1, "turns": list(range(10_000))},
            ]
        }
    )
    assert [v.turns for v in reply.verdicts[:3]] == [[3, 1], [], []]
    assert reply.verdicts[3].turns == list(range(MAX_ATTRIBUTED_TURNS))
