"""Rubric canary: re-score probes under a candidate rubric before it is published."""

from __future__ import annotations

import asyncio
import logging

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field

from amaris.agents.findings import StepFindings
from amaris.agents.schemas import RubricUpdateProposal
from amaris.rubric.guardrails import UpdateRejected
from amaris.rubric.informativeness import DueCriterion
from amaris.rubric.model import RubricVersion
from amaris.steps.context import get_context
from amaris.trust.rubric_canary.check import run_canary
from amaris.trust.rubric_canary.plan import MAX_HACK_PROBES
from amaris.trust.rubric_canary.report import CanaryReport, CanaryRollout
from tasks._common import apply_proposal, training_scorer

log = logging.getLogger("amaris.pipeline")

LEDGER_AGENT = "canary"
"""The ledger agent the canary's scorer calls are counted under."""


class CanaryRequest(BaseModel):
    """What the canary checks: a proposal on the rubric of ``base_version``, and the
    step's rollouts of the scope."""

    step: int = Field(ge=0)
    scope: str
    base_version: int = Field(ge=1)
    proposal: RubricUpdateProposal
    due: list[DueCriterion] = Field(default_factory=list)
    rollouts: list[CanaryRollout] = Field(default_factory=list)
    flagged: list[str] = Field(default_factory=list)
    """Ids of the rollouts the step's analysis flagged as reward hacking."""
    findings: StepFindings | None = None
    """The step's findings its criteria may cite (None: no support check)."""


@task(name="rubric-canary", cache_policy=NO_CACHE, task_run_name="rubric-canary-{request.scope}")
async def check_canary(request: CanaryRequest) -> CanaryReport:
    """The canary's report on the candidate rubric the proposal makes: ``passed``,
    ``refused`` (with the reason, which refuses the update) or ``skipped`` (off, nothing
    to check, or a proposal the guardrails refuse: publishing says why)."""
    ctx = get_context()
    settings = ctx.settings.pipeline.canary
    report = await _check(request)
    ctx.canary[report.outcome] += 1
    ctx.canary["probes"] += len(report.probes)
    ctx.canary["judge_calls"] += report.judge_calls
    log.log(
        logging.WARNING if report.outcome == "refused" else logging.INFO,
        "step %s (%r): rubric canary %s%s (%d probes, %d scorer calls of %d allowed, max_share %s)",
        request.step,
        request.scope,
        report.outcome,
        f": {report.reason}" if report.reason else "",
        len(report.probes),
        report.judge_calls,
        report.budget,
        settings.max_share,
    )
    return report


async def _check(request: CanaryRequest) -> CanaryReport:
    ctx = get_context()
    settings = ctx.settings.pipeline.canary
    if not settings.enabled:
        return CanaryReport(outcome="skipped", reason="pipeline.canary.enabled is false")
    current = await asyncio.to_thread(ctx.rubrics.current, request.scope)
    if current.version != request.base_version:
        return CanaryReport(outcome="skipped", reason="the rubric moved during the step")
    try:
        _, _, applied = await asyncio.to_thread(
            apply_proposal, current, request.proposal, request.due, request.findings
        )
    except UpdateRejected as exc:
        return CanaryReport(outcome="skipped", reason=f"the guardrails refuse it: {exc}")
    if not applied.changed:
        return CanaryReport(outcome="skipped", reason="the proposal changes nothing")
    candidate = RubricVersion(
        version=current.version + 1,
        scope=current.scope,
        parent=current.version,
        step=request.step,
        origin="updater",
        anchors=current.anchors,
        adaptive=applied.adaptive,
        next_adaptive_id=applied.next_adaptive_id,
    )
    scorer = training_scorer(LEDGER_AGENT)
    # The hacks earlier steps remembered (this step's are still being written, and its
    # rollouts are probes already).
    hacks = await asyncio.to_thread(
        ctx.memory.recent_hacks, request.scope, request.step, MAX_HACK_PROBES
    )
    return await run_canary(
        scorer,
        current,
        candidate,
        request.rollouts,
        step=request.step,
        max_share=settings.max_share,
        max_gap_shrink=settings.max_gap_shrink,
        hacks=hacks,
        flagged=request.flagged,
    )
