"""Summarizer: one batch summary per chunk of analyses."""

from __future__ import annotations

import logging

from amaris.agents.blocks import SummaryInput, TrainerMetadata
from amaris.agents.payloads import ScoreStats
from amaris.agents.schemas import BatchSummary
from tasks._common import ask, criteria_context, dumped, llm_task
from tasks.models import AgentCriterion, ScoredAnalysis

log = logging.getLogger("amaris.pipeline")


def summary_payload(
    step: int,
    metadata: TrainerMetadata,
    analyses: list[ScoredAnalysis],
) -> SummaryInput:
    """The summarizer's per-call data: the analyses and their scores' statistics (the
    criteria are its context)."""
    scores = [a.score for a in analyses if a.score is not None]
    stats: ScoreStats = {
        "count": len(analyses),
        "scored": len(scores),
        "mean": round(sum(scores) / len(scores), 4) if scores else None,
        "min": min(scores) if scores else None,
        "max": max(scores) if scores else None,
    }
    return {"step": step, "metadata": metadata, "score_stats": stats, "analyses": dumped(analyses)}


@llm_task("summarizer", "summarize", "summarize-{scope}-chunk-{chunk}")
async def summarize_chunk(
    step: int,
    scope: str,
    chunk: str,
    metadata: TrainerMetadata,
    criteria: list[AgentCriterion],
    analyses: list[ScoredAnalysis],
) -> BatchSummary:
    """Summarise a chunk of a step's analyses (each with its rollout's ``score``).

    ``chunk`` names it: the analysis chunk's index, with ``.<part>`` when the chunk was
    split to fit the summarizer's context budget (:func:`summary_payload` is its input).
    """
    data = summary_payload(step, metadata, analyses)
    summary = await ask("summarizer", criteria_context(criteria), data, BatchSummary, step)
    log.info(
        "step %s (%r): chunk %s summarised, %d reward-hacking behaviour(s)",
        step,
        scope,
        chunk,
        len(summary.aggregated_reward_hacking.behaviours),
    )
    return summary
