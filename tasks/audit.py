"""Audit: the audit judge re-grades a sample of the step's scored rollouts; the step's
fidelity and the Goodhart alarm come of it (:mod:`amaris.trust.audit`, docs/fidelity.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from amaris.memory.records import RolloutRecord
from amaris.rubric.model import RubricVersion
from amaris.scoring.calibration import drop_audit
from amaris.scoring.scorer import Scorer
from amaris.settings import AUDITOR, AuditSettings
from amaris.steps.context import get_context
from amaris.trust import mining
from amaris.trust.audit.alarm import SwapTally, TrendPoint, check_alarm, evidence
from amaris.trust.audit.fidelity import fidelity
from amaris.trust.audit.history import audit_history
from amaris.trust.audit.models import OVER_REWARDED_KEPT, AuditedRollout, RewardGap, StepAudit
from amaris.trust.audit.pause import AuditPause
from amaris.trust.audit.regrade import regrade_all
from amaris.trust.audit.sampling import Drawn, sample_size, stratified_sample
from amaris.trust.budget import canaries_left, sample_cap
from amaris.trust.judge_canaries import Probe, ProbeResult, canary_sources, judge_probes, mine
from tasks._common import llm_task, training_scorer, unwalked
from tasks.judge_canaries import LEDGER_AGENT

log = logging.getLogger("amaris.pipeline")


def _audited(record: RolloutRecord) -> bool:
    """A rollout the auditor can re-grade: scored by the judge (not the pre-check's floor,
    not unscored), under a known rubric version."""
    return (
        record.status == "scored"
        and record.score is not None
        and record.rubric_version is not None
        and any(v.kind == "judge" for v in record.verdicts)
    )


def sample_key(record: RolloutRecord) -> str:
    """What identifies a rollout in the audit's sample and orders equally rewarded ones:
    its scope and id, not its arrival order (``seq`` only tells apart records of one id),
    so a step's sample is the same whichever order its rollouts came in."""
    return f"{record.scope}\x00{record.rollout.id}\x00{record.seq}"


def _earlier(step: int) -> tuple[list[TrendPoint], list[tuple[int, int]]]:
    """The sample figures of the audited steps before ``step``, oldest first, and each
    audited step's (judged rollouts, rollouts re-graded): what the budgets spent."""
    history = audit_history(get_context().steps, step)
    points = [
        TrendPoint(
            step=audit.step,
            training=audit.training_mean,
            audit=audit.audit_mean,
            gap=audit.top_tail_gap,
            graded=audit.sampled,
            over_rewarded=audit.over_rewarded_count,
            top_tail_sampled=audit.top_tail_sampled,
            top_tail_kept=audit.top_tail_kept,
            tally=tuple(audit.tally),
            swaps=SwapTally(audit.swap_checked, audit.swap_blind) if audit.swap_checked else None,
        )
        for audit in history
        if audit.training_mean is not None and audit.audit_mean is not None
    ]
    return points, [(audit.population, audit.sampled + audit.failed) for audit in history]


def over_rewarded(audited: list[AuditedRollout]) -> list[RewardGap]:
    """The graded rollouts the training judge rewarded above the auditor, most
    over-rewarded first (then by id), at most :data:`OVER_REWARDED_KEPT`."""
    gaps = [
        RewardGap(rollout_id=r.rollout_id, scope=r.scope, training=r.training, audit=r.audit)
        for r in audited
        if r.audit is not None and r.training > r.audit
    ]
    return sorted(gaps, key=lambda g: (-g.excess, g.rollout_id))[:OVER_REWARDED_KEPT]


def swap_probes(
    sample: Sequence[Drawn[RolloutRecord]],
    audited: Sequence[AuditedRollout],
    settings: AuditSettings,
) -> list[Probe]:
    """The step's swap checks (at most ``audit.swap_checks``): the sampled top-tail
    rollouts the auditor rewarded at least ``audit.max_gap_jump`` below the training
    judge, most over-rewarded first, each with its final answer swapped for a wrong one
    (a reply with no numeric final answer to swap, or too long to mine, is passed over)."""
    records = {(d.item.scope, d.item.rollout.id): d.item for d in sample}
    over = sorted(
        (
            r
            for r in audited
            if r.top_tail and r.audit is not None and r.training - r.audit >= settings.max_gap_jump
        ),
        key=lambda r: (-r.gap, r.scope, r.rollout_id),
    )
    chosen = (records.get((r.scope, r.rollout_id)) for r in over)
    return _swapped([r for r in chosen if r is not None], settings.swap_checks)


def _swapped(records: Sequence[RolloutRecord], most: int, first: int = 0) -> list[Probe]:
    """Swap checks of ``records`` in turn (at most ``most``; ids from ``swap-check-{first}``
    on), passing over a reply with no numeric final answer to swap or too long to mine."""
    probes: list[Probe] = []
    for record in records:
        if len(probes) >= most:
            break
        if len(record.rollout.output) > mining.MAX_SOURCE_CHARS:
            continue
        for source in canary_sources([record]):
            mined = mine("swapped", source)
            if mined is None:
                continue
            text, baseline = mined
            probes.append(
                Probe(
                    id=f"swap-check-{first + len(probes)}",
                    kind="swapped",
                    scope=source.scope,
                    rubric_version=source.rubric_version,
                    rollout_id=source.id,
                    input=source.input,
                    output=text,
                    supplemental_context=source.supplemental_context,
                    baseline=baseline,
                )
            )
    return probes


def confirm_probes(
    scored: Sequence[RolloutRecord],
    sample: Sequence[Drawn[RolloutRecord]],
    checked: Sequence[ProbeResult],
    earlier: Sequence[TrendPoint],
    settings: AuditSettings,
) -> list[Probe]:
    """Swap checks that confirm the run's first swap-blind one (at most
    ``audit.swap_checks``): when a check of this step found the training judge blind and no
    audited step before had, the step's other top-tail rollouts (by training reward, as the
    sample's ``top_tail`` threshold has it), longest first, with their final answer swapped.

    One check is one Bernoulli draw of the ``swap_blind`` test, which asks two blind ones:
    a judge turned lenient to a hack the policy had all but dropped shows on one top-tail
    rollout at the drift step and maybe on none the next steps, so the step that shows it
    must confirm it. A steady judge is found blind rarely, so these cost nothing there;
    once a blind check is in the history, later ones are tested against it and are not
    confirmed (at most ``swap_checks`` calls a run while the judge stays blind)."""
    if not any(c.alarm for c in checked if c.reward is not None):
        return []
    if any(p.swaps is not None and p.swaps.blind for p in earlier):
        return []
    tail = [d.threshold for d in sample if d.top_tail]
    if not tail:
        return []
    done = {(c.scope, c.rollout_id) for c in checked}
    others = sorted(
        (
            r
            for r in scored
            if (r.scope, r.rollout.id) not in done and float(r.score or 0.0) >= tail[0]
        ),
        key=lambda r: (-len(r.rollout.output), sample_key(r)),
    )
    return _swapped(others, settings.swap_checks, first=len(checked))


async def swap_checks(
    step: int,
    scored: Sequence[RolloutRecord],
    sample: Sequence[Drawn[RolloutRecord]],
    audited: Sequence[AuditedRollout],
    versions: dict[tuple[str, int], RubricVersion],
    earlier: Sequence[TrendPoint],
    settings: AuditSettings,
) -> list[ProbeResult]:
    """The step's swap checks (and those that confirm the run's first blind one:
    :func:`confirm_probes`) judged by the training judge (as judge canaries: ledger
    agent ``judge_canary``): a result's ``alarm`` says the swapped reply was paid within
    ``judge_canaries.swap_tolerance`` of the original (swap-blind)."""
    if settings.swap_checks == 0:
        return []
    probes = await asyncio.to_thread(swap_probes, sample, audited, settings)
    if not probes:
        return []
    results = await _judge_swaps(step, probes, versions)
    confirm = await asyncio.to_thread(confirm_probes, scored, sample, results, earlier, settings)
    for probe in confirm:
        key = (probe.scope, probe.rubric_version)
        if key not in versions:
            versions[key] = await asyncio.to_thread(get_context().rubrics.get, key[1], key[0])
    return results + (await _judge_swaps(step, confirm, versions) if confirm else [])


async def _judge_swaps(
    step: int, probes: Sequence[Probe], versions: Mapping[tuple[str, int], RubricVersion]
) -> list[ProbeResult]:
    ctx = get_context()
    scorer = training_scorer(LEDGER_AGENT)
    canaries = ctx.settings.judge_canaries
    results = await judge_probes(
        scorer,
        list(probes),
        versions,
        step=step,
        floor=ctx.settings.scoring.precheck.floor,
        floor_margin=canaries.floor_margin,
        swap_tolerance=canaries.swap_tolerance,
    )
    for result in results:
        log.info(
            "step %s: swap check of rollout %s: %s%s",
            step,
            result.rollout_id,
            result.reason,
            " (swap-blind)" if result.alarm else "",
        )
    return results


@llm_task(AUDITOR, "audit", "audit-step-{step}")
async def audit_step(step: int, records: list[RolloutRecord], settings: AuditSettings) -> StepAudit:
    """The step's audit: a sample of ``records`` stratified by reward (top tail
    over-sampled), re-graded by the auditor under the rubric version that scored each,
    its fidelity for the step and per scope, and the alarm (with its evidence per scope).
    ``settings`` (``audit:``) is a parameter so that the cache key holds it."""
    ctx = get_context()
    scored = [r for r in records if _audited(r)]
    earlier, regraded = await asyncio.to_thread(_earlier, step)
    allowed, cap = sample_cap(settings, len(scored), regraded)
    sample = stratified_sample(
        scored,
        lambda r: float(r.score or 0.0),
        sample_key,
        sample_size(len(scored), settings.sample_share, settings.min_samples, cap),
        top_tail=settings.top_tail,
        top_tail_share=settings.top_tail_share,
        seed=f"audit-step-{step}",
        length=lambda r: len(r.rollout.output),
    )
    versions: dict[tuple[str, int], RubricVersion] = {}
    for drawn in sample:
        key = (drawn.item.scope, drawn.item.rubric_version or 0)
        if key not in versions:
            versions[key] = await asyncio.to_thread(ctx.rubrics.get, key[1], key[0])
    scorer = Scorer(
        ctx.settings.scoring, ctx.gateway, ctx.rubrics, ctx.prompts["scorer"], agent=AUDITOR
    )
    audited = await regrade_all(
        scorer, sample, [versions[(d.item.scope, d.item.rubric_version or 0)] for d in sample]
    )
    if ctx.settings.cascade_on:  # the cascade pairs them with the cheap verdicts it served
        await asyncio.to_thread(drop_audit, ctx.settings.memory.path, step, audited, len(scored))
    whole = fidelity(audited)
    scopes = sorted({r.scope for r in audited})
    per_scope = {scope: fidelity([r for r in audited if r.scope == scope]) for scope in scopes}
    checks = await swap_checks(step, scored, sample, audited, versions, earlier, settings)
    judged = [c for c in checks if c.reward is not None]
    swaps = SwapTally(len(judged), sum(c.alarm for c in judged)) if judged else None
    alarm = check_alarm(whole, step, earlier, settings, swaps)
    spent = len(sample) + len(checks)
    canaries = canaries_left(
        ctx.settings.judge_canaries, step, len(scored), allowed, spent, len(checks)
    )
    counters = scorer.counters
    return StepAudit(
        step=step,
        sampled=whole.sampled,
        failed=whole.failed,
        agreement=whole.agreement,
        top_tail_agreement=whole.top_tail_agreement,
        gap=whole.gap,
        top_tail_gap=whole.top_tail_gap,
        top_tail_sampled=whole.top_tail_sampled,
        top_tail_kept=whole.top_tail_kept,
        over_rewarded_count=whole.over_rewarded,
        tally=whole.tally,
        swap_checked=swaps.checked if swaps else 0,
        swap_blind=swaps.blind if swaps else 0,
        alarm=alarm,
        training_mean=whole.training_mean,
        audit_mean=whole.audit_mean,
        judge_calls=counters["scored"] + counters["unscored"] - counters["rule_only"],
        population=len(scored),
        check_budget=allowed,
        canary_budget=canaries,
        criteria=whole.criteria,
        scopes=per_scope,
        evidence={
            scope: evidence(
                step,
                alarm,
                [r for r in audited if r.scope == scope],
                per_scope[scope].criteria,
            )
            for scope in scopes
        }
        if alarm is not None
        else {},
        over_rewarded=over_rewarded(audited),
    )


async def run_audit(step: int, records: list[RolloutRecord]) -> StepAudit | None:
    """The step's audit (None while the auditor is off), kept in the step's registry
    record, counted for ``/metrics``, logged; on an alarm with ``audit.on_alarm: pause``,
    scoring is paused until acknowledged."""
    ctx = get_context()
    if not ctx.settings.auditor_on:
        return None
    audit = await audit_step(step, unwalked(records), ctx.settings.audit)
    await asyncio.to_thread(ctx.steps.set, step, audit=audit.model_dump(mode="json"))
    ctx.fidelity.record(audit)
    log.info(
        "step %s: audit of %d rollouts (%d without a verdict): agreement %s, gap %s, "
        "top-tail agreement %s",
        step,
        audit.sampled,
        audit.failed,
        audit.agreement,
        audit.gap,
        audit.top_tail_agreement,
    )
    if audit.alarm is not None:
        log.warning("step %s: FIDELITY ALARM (%s): %s", step, audit.alarm.kind, audit.alarm.reason)
        if ctx.settings.audit.on_alarm == "pause":
            await asyncio.to_thread(
                AuditPause(ctx.settings.memory.path).pause, step, audit.alarm.reason
            )
    return audit
