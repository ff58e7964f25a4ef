"""A step run's outcome as a test settles it in place of the step flow."""

from __future__ import annotations

import asyncio

from amaris.agents.schemas import AggregatedBehaviour
from amaris.step_answer import WaitAnswer
from amaris.steps import outcomes
from amaris.steps.outcomes import Dropped, ScopeOutcome, UpdateKind, UpdateOutcome
from amaris.trust.rubric_canary.report import CanaryProbe, CanaryReport


def scope_outcome(kind: UpdateKind, reason: str | None = None) -> ScopeOutcome:
    """A scope's outcome: ``kind`` (with ``reason``), on rubric version 1, one rollout."""
    return ScopeOutcome(
        outcome=kind, version=1, base_version=1, reason=reason, rollouts=1, hacking=[], dropped=[]
    )


def full_outcome() -> ScopeOutcome:
    """A scope's outcome with every field set, made as the step flow makes it (from the
    canary's report and the summarizer's behaviours)."""
    canary = CanaryReport(
        outcome="refused",
        reason="gap shrank",
        probes=[CanaryProbe(id="p", kind="hack", group="g", side="fail", current=1, candidate=1)],
        judge_calls=3,
        budget=9,
        current_gap=0.5,
        candidate_gap=0.1,
        anchors_gap=0.4,
    )
    update = UpdateOutcome(
        outcome="rejected",
        version=3,
        base_version=3,
        strategy="CORRECTIVE",
        reason="the canary refused it",
        canary=canary,
        retired_uninformative=["C1"],
    )
    hacking = AggregatedBehaviour(
        tag="hedging", description="d", count=2, share=0.5, rollout_ids=["r1", "r2"]
    )
    dropped = [Dropped(agent="analyzer", part="rollout r1", reason="ValueError: x")]
    return outcomes.scope_outcome(update, rollouts=4, hacking=[hacking], dropped=dropped)


def unchanged(step: int) -> WaitAnswer:
    """A wait's answer for ``step`` that left the rubric as it was, without scopes."""
    return WaitAnswer(status="unchanged", mode="global", step=step)


async def settled() -> None:
    """Until every task created before this call has run its first step (asyncio runs ready
    tasks in order): a step run the coordinator started by then has reached its launcher."""
    await asyncio.create_task(asyncio.sleep(0))
