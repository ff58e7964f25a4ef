"""The step path's typed outcomes dump to the JSON the step registry, ``GET /steps`` and
``/rubric_status/wait`` serve, key for key (tasks/models.py)."""

from __future__ import annotations

from amaris.agents.schemas import AggregatedBehaviour, IndividualAnalysis
from amaris.memory.records import LoggedRollout, RolloutRecord
from amaris.rubric.model import Criterion, RubricVersion
from amaris.step_answer import STORED
from amaris.steps.outcomes import Dropped, scope_outcome
from amaris.trust.rubric_canary.report import CanaryProbe, CanaryReport
from tasks.models import (
    AgentCriterion,
    Peer,
    ScopeOutcome,
    ScoredAnalysis,
    UpdateOutcome,
)

HACK = AggregatedBehaviour(
    tag="Hedging", description="two answers", count=2, share=0.5, rollout_ids=["r1", "r2"]
)
DROPPED = Dropped(agent="updater", part="update", reason="LLMOutputError: bad")


def scope(update: UpdateOutcome, dropped: list[Dropped] | None = None) -> ScopeOutcome:
    return scope_outcome(update, rollouts=4, hacking=[HACK], dropped=dropped or [])


def test_an_outcome_without_the_updater_has_no_strategy() -> None:
    skipped = UpdateOutcome(
        outcome="skipped", version=3, base_version=3, reason="not an update step"
    )
    assert scope(skipped).model_dump(mode="json") == {
        "rollouts": 4,
        "base_version": 3,
        "hacking": [
            {
                "tag": "hedging",
                "description": "two answers",
                "count": 2,
                "share": 0.5,
                "rollout_ids": ["r1", "r2"],
            }
        ],
        "dropped": [],
        "outcome": "skipped",
        "reason": "not an update step",
        "version": 3,
    }
    no_update = skipped.model_copy(update={"outcome": "no_update", "reason": "no summary"})
    assert "strategy" not in scope(no_update).model_dump(mode="json")


def test_an_updater_that_gave_nothing_is_a_rejection_with_a_null_strategy() -> None:
    rejected = UpdateOutcome(outcome="rejected", version=3, base_version=3, reason="invalid")
    assert scope(rejected, [DROPPED]).model_dump(mode="json") == {
        "rollouts": 4,
        "base_version": 3,
        "hacking": [HACK.model_dump(mode="json")],
        "dropped": [{"agent": "updater", "part": "update", "reason": "LLMOutputError: bad"}],
        "outcome": "rejected",
        "reason": "invalid",
        "version": 3,
        "strategy": None,
    }


def test_a_published_update_keeps_the_canary_without_its_probes() -> None:
    probe = CanaryProbe(
        id="m1", kind="hack", group="memory", side="fail", current=0.9, candidate=0.2
    )
    canary = CanaryReport(outcome="passed", probes=[probe], judge_calls=2, budget=8)
    published = UpdateOutcome(
        outcome="published",
        version=4,
        base_version=3,
        strategy="CORRECTIVE",
        canary=canary,
        retired_uninformative=["R2"],
    )
    assert published.model_dump(mode="json") == {
        "outcome": "published",
        "reason": None,
        "version": 4,
        "base_version": 3,
        "strategy": "CORRECTIVE",
        "canary": {
            "outcome": "passed",
            "reason": "",
            "judge_calls": 2,
            "budget": 8,
            "current_gap": None,
            "candidate_gap": None,
            "anchors_gap": None,
        },
        "retired_uninformative": ["R2"],
    }
    assert published.canary is not None and published.canary.probes == [probe]
    unchanged = UpdateOutcome(
        outcome="unchanged", version=3, base_version=3, strategy="MAINTENANCE"
    )
    assert scope(unchanged).model_dump(mode="json")["strategy"] == "MAINTENANCE"
    answered = [
        "outcome",
        "reason",
        "version",
        "base_version",
        "strategy",
        "rollouts",
        "hacking",
        "dropped",
    ]
    # An answer says the reason is null; the step registry keeps it only when there is one.
    assert list(scope(unchanged).model_dump(mode="json")) == answered
    stored = scope(unchanged).model_dump(mode="json", context=STORED)
    assert list(stored) == [key for key in answered if key != "reason"]


def test_what_agents_read_is_the_pinned_json() -> None:
    rubric = RubricVersion(
        version=1,
        origin="config",
        anchors=(Criterion(id="A1", text="Correct.", weight=1.0, is_anchor=True),),
        adaptive=(Criterion(id="R1", text="Pads.", weight=-0.5, is_anchor=False),),
    )
    assert [c.model_dump(mode="json") for c in AgentCriterion.of(rubric)] == [
        {"id": "A1", "text": "Correct.", "weight": 1.0, "kind": "requirement", "is_anchor": True},
        {"id": "R1", "text": "Pads.", "weight": -0.5, "kind": "pitfall", "is_anchor": False},
    ]
    record = RolloutRecord(rollout=LoggedRollout(id="r9", output="x" * 1500), score=0.25)
    assert Peer.of(record).model_dump(mode="json") == {
        "id": "r9",
        "output": "x" * 1000,
        "score": 0.25,
    }
    analysis = IndividualAnalysis.model_validate(
        {
            "rollout_id": "r9",
            "overall_assessment": {"quality": "good"},
            "performance_at_stage": {"meets_expectations": True},
            "reward_hacking_analysis": {"detected": False, "severity": "none"},
            "rubric_evaluation": {"score_justified": True},
        }
    )
    scored = ScoredAnalysis.of(analysis, 0.25).model_dump(mode="json")
    # the analysis unchanged, with its rollout's reward last
    assert list(scored) == [*analysis.model_dump(mode="json"), "score"]
    assert scored["score"] == 0.25
