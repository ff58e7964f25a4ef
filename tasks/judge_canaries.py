"""Judge canaries: the training judge scores the step's probes; an alarm teaches the
pre-check a rule (docs/judge-canaries.md)."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from pydantic import BaseModel, Field

from amaris.memory.records import RolloutRecord
from amaris.rubric.model import RubricVersion
from amaris.steps.context import get_context
from amaris.trust.audit.models import StepAudit
from amaris.trust.judge_canaries import (
    AuditPair,
    CanarySource,
    JudgeCanaryReport,
    Probe,
    ProbeResult,
    budget_of,
    canary_sources,
    judge_probes,
    plan_probes,
)
from amaris.trust.learned_rules import LEARNED_FROM, new_rule
from amaris.trust.precheck import degenerate
from amaris.trust.rule_store import LearnedRule
from tasks._common import llm_task, training_scorer

log = logging.getLogger("amaris.pipeline")

LEDGER_AGENT = "judge_canary"
"""The ledger agent the judge canaries' scorer calls are counted under."""


class JudgeCanaryRequest(BaseModel):
    """What the step's judge canaries read: its judged rollouts, and the audit judge's
    disagreements (none until the audit judge runs)."""

    step: int = Field(ge=0)
    sources: list[CanarySource] = Field(default_factory=list)
    audit_pairs: list[AuditPair] = Field(default_factory=list)
    budget: int | None = Field(default=None, ge=0)
    """Probes the step's audit left them (``audit.budget_share``, its swap checks taken
    off); None without an audit: ``judge_canaries.max_share``."""

    @classmethod
    def of(
        cls,
        step: int,
        records: list[RolloutRecord],
        audit_pairs: list[AuditPair] | None = None,
        budget: int | None = None,
    ) -> JudgeCanaryRequest:
        """The request of ``step`` from its logged rollouts."""
        return cls(
            step=step,
            sources=canary_sources(records),
            audit_pairs=audit_pairs or [],
            budget=budget,
        )


def audit_pairs(
    audit: StepAudit | None, records: list[RolloutRecord], beyond: float
) -> list[AuditPair]:
    """The step's audit-disagreement pairs: the sampled rollouts the training judge
    rewarded more than ``beyond`` above the audit judge (most first), each with its
    record's reply, reference and rubric version; none without an audit."""
    if audit is None:
        return []
    by_id = {(r.scope, r.rollout.id): r for r in records if r.rubric_version is not None}
    pairs = []
    for gap in audit.disagreements(beyond):
        record = by_id.get((gap.scope, gap.rollout_id))
        if record is None or record.rubric_version is None:
            continue
        pairs.append(
            AuditPair(
                rollout_id=gap.rollout_id,
                scope=gap.scope,
                input=record.rollout.input,
                output=record.rollout.output,
                supplemental_context=record.rollout.supplemental_context,
                rubric_version=record.rubric_version,
                training_reward=gap.training,
                audit_reward=gap.audit,
            )
        )
    return pairs


@llm_task("scorer", "judge-canaries", "judge-canaries-step-{request.step}")
async def check_judge_canaries(request: JudgeCanaryRequest) -> JudgeCanaryReport:
    """The step's judge canaries: probes judged, alarms logged, counted and (for the kinds
    that teach one) turned into learned pre-check rules."""
    ctx = get_context()
    report = await _check(request)
    for result in report.results:
        ctx.judge_canaries[f"probes.{result.kind}"] += 1
        if result.alarm:
            ctx.judge_canaries[f"alarms.{result.kind}"] += 1
            log.warning(
                "step %s (%r): judge canary alarm: %s (probe %s of rollout %s: %r)%s",
                request.step,
                result.scope,
                result.reason,
                result.id,
                result.rollout_id,
                result.preview,
                f"; learned pre-check rule {result.rule}" if result.rule else "",
            )
    log.info(
        "step %s: judge canaries %s%s: %d probe(s) of %d allowed (%d judged rollouts, %s), "
        "%d alarm(s)",
        request.step,
        report.outcome,
        f" ({report.reason})" if report.reason else "",
        len(report.results),
        report.budget,
        report.judged,
        f"judge_canaries.max_share {ctx.settings.judge_canaries.max_share}"
        if request.budget is None
        else "what the audit left of audit.budget_share",
        len(report.alarms),
    )
    return report


async def _check(request: JudgeCanaryRequest) -> JudgeCanaryReport:
    ctx = get_context()
    settings = ctx.settings.judge_canaries
    judged = len(request.sources)
    # With an audit, the step's budget is shared: the audit says what it left them.
    budget = request.budget
    if budget is None:
        budget = budget_of(judged, settings.max_share, request.step)
    base = JudgeCanaryReport(step=request.step, outcome="skipped", judged=judged, budget=budget)
    if not settings.enabled:
        return base.model_copy(update={"reason": "judge_canaries.enabled is false"})
    floor = ctx.settings.scoring.precheck.floor
    # Mining reads up to MAX_TRIES replies per kind: in a thread, off the pipeline's loop.
    probes = await asyncio.to_thread(
        partial(
            plan_probes,
            request.sources,
            request.audit_pairs,
            step=request.step,
            budget=budget,
            min_swap_reward=floor + settings.floor_margin + settings.swap_tolerance,
        )
    )
    if not probes:
        why = "no probe falls on this step" if budget == 0 else "nothing to probe"
        return base.model_copy(update={"reason": why})
    wanted = {(p.scope, p.rubric_version) for p in probes}
    rubrics: dict[tuple[str, int], RubricVersion] = {}
    for scope, version in wanted:
        rubrics[(scope, version)] = await asyncio.to_thread(ctx.rubrics.get, version, scope)
    scorer = training_scorer(LEDGER_AGENT)
    results = await judge_probes(
        scorer,
        probes,
        rubrics,
        step=request.step,
        floor=floor,
        floor_margin=settings.floor_margin,
        swap_tolerance=settings.swap_tolerance,
    )
    by_id = {p.id: p for p in probes}
    learned = [await _learn(request.step, by_id[r.id], r) for r in results]
    return base.model_copy(update={"outcome": "checked", "results": learned})


async def _learn(step: int, probe: Probe, result: ProbeResult) -> ProbeResult:
    """``result`` with the rule its alarm taught the pre-check, when it teaches one."""
    ctx = get_context()
    settings = ctx.settings.judge_canaries
    store = ctx.precheck_rules
    if not result.alarm or probe.kind not in LEARNED_FROM or result.reward is None:
        return result
    if store is None or not settings.learn_rules:
        return result
    if degenerate(probe.output, probe.input, probe.supplemental_context) is not None:
        return result  # the built-in pre-check floors it already
    if len(store.index()) >= settings.max_rules:
        log.warning(
            "step %s: judge_canaries.max_rules (%d) learned rules in force: no rule for %s",
            step,
            settings.max_rules,
            probe.id,
        )
        return result
    rule: LearnedRule = new_rule(
        kind=probe.kind,
        text=probe.output,
        prompt=probe.input,
        step=step,
        scope=probe.scope,
        rollout_id=probe.rollout_id,
        reward=result.reward,
    )
    added = await asyncio.to_thread(store.add, rule)
    return result.model_copy(update={"rule": (added or rule).id})
