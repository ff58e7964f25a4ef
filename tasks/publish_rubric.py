"""Validate an update against the guardrails and publish it as a rubric version."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping

from prefect import task
from prefect.cache_policies import NO_CACHE

from amaris.agents.findings import StepFindings
from amaris.agents.schemas import RubricUpdateProposal
from amaris.memory.models import MemoryDocument
from amaris.rubric.guardrails import UpdateRejected
from amaris.rubric.informativeness import DueCriterion
from amaris.steps.context import get_context
from amaris.steps.outcomes import UpdateKind, UpdateOutcome
from amaris.trust.rubric_canary.report import CanaryReport
from tasks._common import apply_proposal

log = logging.getLogger("amaris.pipeline")


@task(name="publish-rubric", cache_policy=NO_CACHE, task_run_name="publish-rubric-{scope}")
async def publish_update(
    step: int,
    scope: str,
    base_version: int,
    proposal: RubricUpdateProposal,
    due: list[DueCriterion] | None = None,
    canary: CanaryReport | None = None,
    findings: StepFindings | None = None,
    batched: bool = False,
) -> UpdateOutcome:
    """Apply, validate and publish; at most one version per step and scope.

    ``batched``: one scope of a per_instance batch. Its caller records the batch's
    published versions together (:func:`record_versions`), and an update that changed
    nothing is not remembered (a prompt's scope has no search of past updates to feed).

    ``canary``: the rubric canary's report on the candidate; ``refused`` refuses the
    update (outcome ``rejected``, the reason prefixed ``rubric canary:``).

    ``findings``: the step's, which the criteria an update adds or edits must cite
    (:func:`~amaris.rubric.support.check_support`); None: not checked.

    ``due``: adaptive criteria uninformative for ``rubric.retire_uninformative_after``
    steps (:class:`DueCriterion`); those the proposal neither rewords nor retires are
    retired with it, their evidence as the reason (``retired_uninformative`` in the
    outcome), within ``pipeline.max_modifications``.

    Returns an outcome: ``published`` (with the new version), ``unchanged`` (a valid
    proposal that changes nothing), ``rejected`` (with the guardrail's reason) or
    ``already_published`` (a re-run of a step that had published).
    """
    ctx = get_context()
    existing = await asyncio.to_thread(ctx.steps.get, step)
    done = existing.rubric_versions.get(scope) if existing is not None else None
    if done is not None:
        return UpdateOutcome(outcome="already_published", version=done, base_version=base_version)
    current = await asyncio.to_thread(ctx.rubrics.current, scope)
    if current.step == step and current.origin == "updater":
        # Published by an earlier run of this step that crashed before recording it.
        await asyncio.to_thread(record_versions, step, {scope: current.version})
        return UpdateOutcome(
            outcome="already_published", version=current.version, base_version=base_version
        )
    parsed = proposal
    extra: list[str] = []

    def ended(kind: UpdateKind, version: int, reason: str | None = None) -> UpdateOutcome:
        return UpdateOutcome(
            outcome=kind,
            version=version,
            base_version=base_version,
            strategy=proposal.update_strategy,
            reason=reason,
            canary=canary,
            retired_uninformative=extra or None,
        )

    try:
        if current.version != base_version:
            raise UpdateRejected(
                f"rubric moved from version {base_version} to {current.version} during the step"
            )
        parsed, extra, applied = await asyncio.to_thread(
            apply_proposal, current, parsed, due or [], findings
        )
        if canary is not None and canary.outcome == "refused" and applied.changed:
            raise UpdateRejected(f"rubric canary: {canary.reason}")
    except UpdateRejected as exc:
        outcome = ended("rejected", current.version, str(exc))
    else:
        if not applied.changed:
            outcome = ended("unchanged", current.version)
        else:
            version = await asyncio.to_thread(
                ctx.rubrics.publish,
                anchors=current.anchors,
                adaptive=applied.adaptive,
                origin="updater",
                step=step,
                next_adaptive_id=applied.next_adaptive_id,
                scope=scope,
                export=False,
            )
            outcome = ended("published", version.version)
            if not batched:
                await asyncio.to_thread(record_versions, step, {scope: version.version})
    log.info(
        "step %s (%r): rubric update %s (%s), version %s -> %s%s",
        step,
        scope,
        outcome.outcome,
        parsed.update_strategy,
        base_version,
        outcome.version,
        f": {outcome.reason!r}" if outcome.reason else "",
    )
    if batched and outcome.outcome not in ("published", "rejected"):
        return outcome
    stored = {**parsed.model_dump(mode="json"), "outcome": outcome.model_dump(mode="json")}
    text = (
        f"Step {step} rubric update ({parsed.update_strategy}, {outcome.outcome}): "
        f"{parsed.rationale.summary} "
        + "; ".join(
            f"{m.action} {m.criterion_id or ''} {m.text or ''} {m.weight or ''}"
            for m in parsed.rubric_modifications
        )
    )[:2000]
    await asyncio.to_thread(
        ctx.memory.add_documents,
        [
            MemoryDocument(
                type="rubric_update",
                step=step,
                scope=scope,
                key="update",
                ids=[],
                text=text,
                doc=stored,
            )
        ],
    )
    return outcome


_RECORDING = threading.Lock()
"""The step's registry entry is read, merged and written whole: one writer at a time."""


def record_versions(step: int, versions: Mapping[str, int]) -> None:
    """Add the versions ``versions`` (by scope) published at ``step`` to its registry entry."""
    if not versions:
        return
    ctx = get_context()
    with _RECORDING:
        existing = ctx.steps.get(step)
        merged = {**(existing.rubric_versions if existing is not None else {}), **versions}
        ctx.steps.set(step, rubric_versions=merged)
