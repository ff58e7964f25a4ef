"""What a step did to the rubric, from its scopes' update outcomes: the rule every surface
applies (``/rubric_status/wait``, ``GET /steps``, the step's Prefect run), and the final
state the step's flow run ends in."""

from __future__ import annotations

import pytest
from prefect.client.schemas.objects import StateType
from pydantic import ValidationError

from amaris.memory.models import StepRecord
from amaris.steps.outcomes import (
    RubricStatus,
    ScopeOutcome,
    StepOutcome,
    UpdateKind,
    rubric_status,
    scopes_json,
)
from flows.step_pipeline import StepResult


@pytest.mark.parametrize(
    ("kinds", "status"),
    [
        (["published"], "updated"),
        (["already_published"], "updated"),
        (["rejected", "published", "unchanged"], "updated"),  # a new version wins
        (["unchanged", "rejected", "no_update"], "rejected"),
        (["rejected"], "rejected"),
        (["skipped", "no_update", "unchanged"], "unchanged"),
        ([], "unchanged"),  # a step without rollouts
    ],
)
def test_the_rule(kinds: list[UpdateKind], status: RubricStatus) -> None:
    assert rubric_status(kinds) == status
    scopes = {f"s{i}": outcome(kind) for i, kind in enumerate(kinds)}
    assert StepOutcome(scopes=scopes).rubric() == status
    recorded = StepRecord(step=0, status="done", scopes=scopes_json(scopes))
    assert StepOutcome.of(recorded) == StepOutcome(scopes=scopes)


def test_a_recorded_outcome_is_read_strictly() -> None:
    assert StepOutcome.of(StepRecord(step=0)).rubric() == "unchanged"
    fields = outcome("unchanged").model_dump(mode="json")
    with pytest.raises(ValidationError):
        StepOutcome.of(StepRecord(step=0, scopes={"global": {**fields, "outcome": "refused"}}))
    with pytest.raises(ValidationError):
        StepOutcome.of(StepRecord(step=0, scopes=["global"]))


def outcome(kind: UpdateKind, reason: str | None = None) -> ScopeOutcome:
    return ScopeOutcome(
        outcome=kind, version=1, base_version=1, reason=reason, rollouts=2, hacking=[], dropped=[]
    )


def test_the_final_state_names_the_outcome_and_gives_rejections_first() -> None:
    result = StepResult(
        step=7,
        rollouts=10,
        scopes={
            "a": outcome("skipped", "not an update step"),
            "b": outcome("unchanged"),
            "c": outcome("no_update", "no summary to update from"),
            "d": outcome("rejected", "anchor A1 is immutable"),
            "e": outcome("rejected", "x" * 500),
        },
    )
    state = result.final_state()
    assert (state.type, state.name) == (StateType.COMPLETED, "Rejected")
    assert state.message == "; ".join(
        [
            "step 7: 1 no_update, 2 rejected, 1 skipped, 1 unchanged",
            "d rejected: anchor A1 is immutable",
            f"e rejected: {'x' * 200}",
            "a skipped: not an update step",
        ]
    )
    assert state.data is result  # what the flow's caller gets


def test_the_final_state_of_a_step_without_scopes() -> None:
    state = StepResult(step=3, rollouts=0, scopes={}).final_state()
    assert (state.type, state.name, state.message) == (
        StateType.COMPLETED,
        "Unchanged",
        "step 3: no scope",
    )
