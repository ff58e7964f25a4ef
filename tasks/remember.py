"""Write a step's analyses, summaries and findings to memory (idempotent)."""

from __future__ import annotations

import asyncio

from prefect import task
from prefect.cache_policies import NO_CACHE

from amaris.agents.schemas import BatchSummary, IndividualAnalysis
from amaris.memory.models import STEP_KEY, HackProbe, MemoryDocument
from amaris.memory.records import RolloutRecord
from amaris.steps.context import get_context


def _finding_text(analysis: IndividualAnalysis) -> str:
    parts = [
        f"{b.tag}: {b.description} ({b.evidence})"
        for b in analysis.reward_hacking_analysis.behaviours
    ]
    return ("; ".join(parts) + ". " + analysis.overall_assessment.summary)[:2000]


def notable(analyses: list[IndividualAnalysis], limit: int) -> list[IndividualAnalysis]:
    """The analyses worth keeping searchable: reward hacking, most severe first."""
    order = {"high": 0, "medium": 1, "low": 2, "none": 3}
    flagged = [a for a in analyses if a.reward_hacking_analysis.detected]
    flagged.sort(key=lambda a: (order[a.reward_hacking_analysis.severity], a.rollout_id))
    return flagged[:limit]


def hack_probes(records: list[RolloutRecord], rollout_ids: set[str]) -> dict[str, HackProbe]:
    """The bounded rollouts of these ids (rollout-log records), for the canary to re-score."""
    found = {}
    for record in records:
        rollout = record.rollout
        if rollout.id in rollout_ids:
            found[rollout.id] = HackProbe(
                rollout_id=rollout.id,
                input=rollout.input,
                output=rollout.output,
                reference=rollout.supplemental_context or None,
            )
    return found


@task(name="remember", cache_policy=NO_CACHE, task_run_name="remember-{scope}")
async def remember(
    step: int,
    scope: str,
    analyses: list[IndividualAnalysis],
    summaries: list[BatchSummary],
    meta_summary: BatchSummary | None,
    records: list[RolloutRecord] | None = None,
    searchable: bool = True,
) -> int:
    """Store full analyses (by rollout id) and the searchable digest; returns documents.

    ``searchable=False``: the summaries are stored by id only, not embedded (a
    per_instance scope: one prompt's summaries, which its static memory reads by id);
    the findings stay searchable.

    A finding (a flagged analysis) keeps its rollout from ``records`` (the step's
    rollout-log records), bounded (:class:`HackProbe`), and the step's re-scorable hacks
    (those with a reference) are indexed for the rubric canary."""
    ctx = get_context()
    await asyncio.to_thread(
        ctx.memory.put_analyses,
        scope,
        step,
        [(a.rollout_id, a.model_dump(mode="json")) for a in analyses],
    )
    summary_docs: list[MemoryDocument] = []
    for index, summary in enumerate(summaries):
        # The step's own summary (the only chunk, or the meta-summary) is keyed STEP_KEY:
        # static memory retrieves it by id.
        key = STEP_KEY if meta_summary is None and len(summaries) == 1 else f"chunk-{index}"
        summary_docs.append(
            MemoryDocument(
                type="batch_summary",
                step=step,
                scope=scope,
                key=key,
                ids=[
                    i for b in summary.aggregated_reward_hacking.behaviours for i in b.rollout_ids
                ][:50],
                text=summary.memory_entry.text[:2000],
                doc=summary.model_dump(mode="json"),
            )
        )
    if meta_summary is not None:
        summary_docs.append(
            MemoryDocument(
                type="meta_summary",
                step=step,
                scope=scope,
                key=STEP_KEY,
                ids=[],
                text=meta_summary.memory_entry.text[:2000],
                doc=meta_summary.model_dump(mode="json"),
            )
        )
    docs = list(summary_docs) if searchable else []
    if not searchable:
        await asyncio.to_thread(ctx.memory.add_documents, summary_docs, searchable=False)
    findings = notable(analyses, ctx.settings.pipeline.findings_per_step)
    probes = hack_probes(records or [], {a.rollout_id for a in findings})
    for analysis in findings:
        docs.append(
            MemoryDocument(
                type="finding",
                step=step,
                scope=scope,
                key=analysis.rollout_id,
                ids=[analysis.rollout_id],
                text=_finding_text(analysis),
                doc=analysis.model_dump(mode="json"),
                probe=probes.get(analysis.rollout_id),
            )
        )
    if docs:
        await asyncio.to_thread(ctx.memory.add_documents, docs)
    rescorable = [a.rollout_id for a in findings if (p := probes.get(a.rollout_id)) and p.reference]
    if rescorable:  # an absent index reads as none
        await asyncio.to_thread(ctx.memory.put_hack_index, scope, step, rescorable)
    return len(docs) + len(analyses) + (0 if searchable else len(summary_docs))
