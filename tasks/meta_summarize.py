"""MetaSummarizer: consolidate the chunk summaries of a large step."""

from __future__ import annotations

from amaris.agents.blocks import SummaryInput, TrainerMetadata
from amaris.agents.schemas import BatchSummary
from tasks._common import ask, criteria_context, dumped, llm_task
from tasks.models import AgentCriterion


@llm_task("meta_summarizer", "meta-summarize", "meta-summarize-{scope}-{part}")
async def meta_summarize(
    step: int,
    scope: str,
    part: str,
    metadata: TrainerMetadata,
    criteria: list[AgentCriterion],
    summaries: list[BatchSummary],
) -> BatchSummary:
    """One summary of ``summaries``: the step's chunk summaries (``part`` ``all``), or a
    group of them when they do not fit the meta-summarizer's context budget together
    (``<level>.<group>``: the flow then consolidates those summaries in turn)."""
    data: SummaryInput = {"step": step, "metadata": metadata, "summaries": dumped(summaries)}
    return await ask("meta_summarizer", criteria_context(criteria), data, BatchSummary, step)
