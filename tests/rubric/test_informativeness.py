"""Per-criterion informativeness: the statistics on hand-computable steps, the streaks
that make an adaptive criterion due, and the retirements amaris adds for it."""

from __future__ import annotations

import math
from typing import Any

import pytest

from amaris.agents.schemas import RubricModification
from amaris.memory.records import RolloutRecord
from amaris.offline.updater import handle_updater
from amaris.rubric.informativeness import (
    CriterionStats,
    DueCriterion,
    ScopeStats,
    due_for_retirement,
    retirements,
    step_stats,
    uninformative_streak,
    updater_view,
)
from amaris.rubric.model import Criterion, RubricVersion

ANCHOR = Criterion(id="A1", text="Correct final answer.", weight=1.0, is_anchor=True)
PITFALL = Criterion(id="R1", text="Offers several answers.", weight=-1.0, is_anchor=False)
STYLE = Criterion(id="R2", text="Shows the working.", weight=0.5, is_anchor=False)
RUBRIC = RubricVersion(version=3, origin="updater", anchors=(ANCHOR,), adaptive=(PITFALL, STYLE))


def record_json(
    rid: str,
    prompt: str,
    score: float | None,
    verdicts: dict[str, float],
    **extra: Any,
) -> dict[str, Any]:
    """A rollout-log record as reward.log_record writes it (JSON)."""
    by_id = {c.id: c for c in RUBRIC.criteria}
    return {
        "scope": "global",
        "rollout": {"id": rid, "input": prompt, "output": "...", "group_id": None},
        "score": score,
        "status": "scored" if score is not None else "unscored",
        "verdicts": [
            {
                "id": cid,
                "text": by_id[cid].text,
                "weight": by_id[cid].weight,
                "is_anchor": by_id[cid].is_anchor,
                "verdict": v,
            }
            for cid, v in verdicts.items()
        ],
        **extra,
    }


def record(
    rid: str, prompt: str, score: float | None, verdicts: dict[str, float], **extra: Any
) -> RolloutRecord:
    return RolloutRecord.model_validate(record_json(rid, prompt, score, verdicts, **extra))


def validated(rows: list[dict[str, Any]]) -> list[RolloutRecord]:
    return [RolloutRecord.model_validate(row) for row in rows]


# Two prompts, two responses each. A1: 4, 0 | 4, 4. R1: 0, 0 | 0, 0. R2: 2, 2 | 3, 1.
STEP = [
    record("a", "Q1", 1.0, {"A1": 4, "R1": 0, "R2": 2}),
    record("b", "Q1", 0.0, {"A1": 0, "R1": 0, "R2": 2}),
    record("c", "Q2", 0.5, {"A1": 4, "R1": 0, "R2": 3}),
    record("d", "Q2", 1.0, {"A1": 4, "R1": 0, "R2": 1}),
    # left out: a late record, an unscored one, and "d" sent before its last record
    record("e", "Q1", 1.0, {"A1": 1, "R1": 4, "R2": 0}, late=True),
    record("f", "Q2", None, {}),
]
STEP.insert(0, record("d", "Q2", 0.0, {"A1": 0, "R1": 4, "R2": 4}))


def by_id(stats: list[ScopeStats]) -> dict[str, CriterionStats]:
    [scope] = stats
    assert scope.scope == "global"
    return {c.id: c for c in scope.criteria}


def test_statistics_of_a_hand_computed_step() -> None:
    [scope] = step_stats(STEP)
    assert scope.rollouts == 4
    assert [c.id for c in scope.criteria] == ["A1", "R1", "R2"]
    a1, r1, r2 = scope.criteria
    # A1: mean 12/4 = 3; deviations 1, -3, 1, 1 -> variance 12/4 = 3
    assert (a1.verdicts, a1.mean, a1.variance) == (4, 3.0, 3.0)
    assert (a1.extreme_share, a1.at_max_share, a1.at_min_share) == (1.0, 0.75, 0.25)
    # Q1 (4, 0) spreads, Q2 (4, 4) does not
    assert (a1.groups, a1.zero_spread_group_share) == (2, 0.5)
    # rewards 1, 0, 0.5, 1 (mean 0.625): cov 2.5/4, var 0.6875/4 -> r = 0.625 / sqrt(3 * 0.171875)
    assert a1.reward_correlation == pytest.approx(0.625 / math.sqrt(3 * 0.171875))
    assert (a1.saturated, a1.zero_spread, a1.uninformative) == (False, False, False)
    # R1: every verdict 0
    assert (r1.mean, r1.variance, r1.extreme_share, r1.at_min_share) == (0.0, 0.0, 1.0, 1.0)
    assert (r1.zero_spread_group_share, r1.reward_correlation) == (1.0, None)
    assert (r1.saturated, r1.zero_spread, r1.uninformative) == (True, True, True)
    # R2: 2, 2, 3, 1: mean 2, variance (0 + 0 + 1 + 1) / 4; no verdict at an end
    assert (r2.mean, r2.variance, r2.extreme_share) == (2.0, 0.5, 0.0)
    assert r2.zero_spread_group_share == 0.5  # Q1 (2, 2) flat, Q2 (3, 1) not
    # verdicts 2, 2, 3, 1 against rewards 1, 0, 0.5, 1: cov (0 + 0 - 0.125 - 0.375) / 4
    assert r2.reward_correlation == pytest.approx(-0.125 / math.sqrt(0.5 * 0.171875))
    assert r2.uninformative is False


def test_saturation_is_one_end_holding_95_percent_and_groups_come_from_group_id() -> None:
    # 19 of 20 verdicts at 4: saturated though it spreads; one group id over all prompts
    rows = [record_json(f"r{i}", f"Q{i}", 1.0, {"A1": 4 if i else 3}) for i in range(20)]
    for row in rows:
        row["rollout"]["group_id"] = "g"
    a1 = by_id(step_stats(validated(rows)))["A1"]
    assert (a1.at_max_share, a1.saturated) == (0.95, True)
    assert (a1.groups, a1.zero_spread_group_share, a1.zero_spread) == (1, 0.0, False)
    assert a1.uninformative is True
    # 18 of 20: not saturated
    rows[1]["verdicts"][0]["verdict"] = 2
    assert by_id(step_stats(validated(rows)))["A1"].uninformative is False


def test_without_groups_zero_spread_is_equal_verdicts_and_needs_two() -> None:
    flat = [record("a", "Q1", 0.5, {"R2": 2}), record("b", "Q2", 0.5, {"R2": 2})]
    r2 = by_id(step_stats(flat))["R2"]
    assert (r2.groups, r2.zero_spread_group_share, r2.zero_spread) == (0, None, True)
    assert r2.uninformative is True
    assert by_id(step_stats(flat[:1]))["R2"].uninformative is False  # one verdict


def stats_of(verdicts: dict[str, float], text: dict[str, str] | None = None) -> ScopeStats:
    """A step in which every criterion got the same verdicts on two prompts, or spread."""
    rows = [record_json(f"x{i}", f"Q{i}", 0.5, verdicts) for i in range(2)]
    for row in rows:
        for v in row["verdicts"]:
            v["text"] = (text or {}).get(v["id"], v["text"])
    [scope] = step_stats(validated(rows))
    return scope


def spread(cid: str) -> ScopeStats:
    rows = [
        record("x0", "Q0", 0.5, {"A1": 4, "R1": 0, "R2": 0, cid: 1}),
        record("x1", "Q1", 0.5, {"A1": 4, "R1": 0, "R2": 0, cid: 3}),
    ]
    [scope] = step_stats(rows)
    return scope


def test_streaks_count_consecutive_steps_under_the_same_text() -> None:
    flat = stats_of({"A1": 4, "R1": 0, "R2": 2})
    history: list[ScopeStats | None] = [flat, flat, spread("R1"), flat]
    assert uninformative_streak(PITFALL, history) == 2
    assert uninformative_streak(STYLE, history) == 4
    assert uninformative_streak(STYLE, [flat, None, flat]) == 1  # a step without rollouts
    reworded = stats_of({"A1": 4, "R1": 0, "R2": 2}, {"R2": "Shows every step of the working."})
    assert uninformative_streak(STYLE, [flat, reworded, flat]) == 1


def test_adaptive_criteria_become_due_after_k_steps_anchors_never() -> None:
    flat = stats_of({"A1": 4, "R1": 0, "R2": 2})
    history: list[ScopeStats | None] = [flat, flat, spread("R2")]
    assert due_for_retirement(RUBRIC, history, None) == []
    assert [(d.criterion_id, d.steps) for d in due_for_retirement(RUBRIC, history, 2)] == [
        ("R1", 3),
        ("R2", 2),
    ]
    # A1 is flat for 3 steps too, but an anchor
    due = due_for_retirement(RUBRIC, history, 3)
    assert [(d.criterion_id, d.steps) for d in due] == [("R1", 3)]
    assert "R1 uninformative for 3 consecutive step(s)" in due[0].evidence
    assert "saturated (100% of 2 verdicts at 0)" in due[0].evidence
    assert due_for_retirement(RUBRIC, history, 4) == []
    view = updater_view(RUBRIC, history, due)
    steps = {row.id: row.uninformative_steps for row in view.criterion_stats}
    assert steps == {"A1": 3, "R1": 3, "R2": 2}
    assert view.uninformative[0].criterion_id == "R1"


def due(cid: str) -> DueCriterion:
    return DueCriterion(criterion_id=cid, text="...", steps=3, evidence=f"{cid} flat")


def test_retirements_are_added_for_due_criteria_the_update_leaves() -> None:
    edit = RubricModification(action="edit", criterion_id="R1", text="Sharper.", reason="")
    extra = retirements(RUBRIC, [], [due("R1"), due("R2")], max_modifications=5)
    assert [(m.action, m.criterion_id) for m in extra] == [("retire", "R1"), ("retire", "R2")]
    assert extra[0].reason == "Retired as uninformative: R1 flat"
    # a reworded criterion is left to its new text; the bound on modifications holds
    assert [m.criterion_id for m in retirements(RUBRIC, [edit], [due("R1"), due("R2")], 5)] == [
        "R2"
    ]
    assert retirements(RUBRIC, [edit], [due("R2")], max_modifications=1) == []
    # never the last positive criterion
    lone = RubricVersion(
        version=1,
        origin="config",
        anchors=(ANCHOR.model_copy(update={"weight": -1.0}),),
        adaptive=(STYLE,),
    )
    assert retirements(lone, [], [due("R2")], 5) == []


def test_the_offline_updater_retires_uninformative_criteria_with_their_evidence() -> None:
    criteria = [
        {**c.model_dump(), "kind": "requirement" if c.weight > 0 else "pitfall"}
        for c in RUBRIC.criteria
    ]
    data = {
        "step": 7,
        "criteria": criteria,
        "bounds": {"max_adaptive": 5, "min_weight": -2, "max_weight": 2, "max_modifications": 3},
        "summary": {"aggregated_reward_hacking": {"behaviours": []}},
        "uninformative": [due("A1").model_dump(), due("R1").model_dump()],
    }
    proposal = handle_updater(data).model_dump(mode="json")
    assert [(m["action"], m["criterion_id"]) for m in proposal["rubric_modifications"]] == [
        ("retire", "R1")
    ]
    assert proposal["rubric_modifications"][0]["reason"] == "Retired as uninformative: R1 flat"
    assert proposal["rubric_modifications"][0]["findings"] == ["R1"]  # the finding it acts on
    assert "R1 flat: retired" in proposal["rationale"]["evidence"]
    assert "Retired uninformative R1" in proposal["rationale"]["summary"]
    # no room: kept, and said so
    data["bounds"] = {**data["bounds"], "max_modifications": 0}
    proposal = handle_updater(data).model_dump(mode="json")
    assert proposal["rubric_modifications"] == []
    assert "R1 flat: no room left to retire it" in proposal["rationale"]["evidence"]


def test_flat_groups_are_zero_spread_though_the_step_varies() -> None:
    # Q1 answered 3, 3 and Q2 1, 1: variance 1 over the step, but no group separates its
    # responses, so GRPO gets no advantage from the criterion.
    rows = [
        record("a", "Q1", 1.0, {"R2": 3}),
        record("b", "Q1", 1.0, {"R2": 3}),
        record("c", "Q2", 0.0, {"R2": 1}),
        record("d", "Q2", 0.0, {"R2": 1}),
    ]
    r2 = by_id(step_stats(rows))["R2"]
    assert (r2.mean, r2.variance, r2.extreme_share) == (2.0, 1.0, 0.0)
    assert (r2.groups, r2.zero_spread_group_share) == (2, 1.0)
    assert r2.reward_correlation == pytest.approx(1.0)
    assert (r2.saturated, r2.zero_spread, r2.uninformative) == (False, True, True)
