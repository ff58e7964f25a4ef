"""QueryGenerator: semantic-memory queries for the rubric update."""

from __future__ import annotations

from amaris.agents.blocks import QueryInput, TrainerMetadata
from amaris.agents.schemas import BatchSummary, QueryPlan
from amaris.steps.context import get_context
from tasks._common import ask, at_most_items, criteria_context, llm_task
from tasks.models import AgentCriterion


def adaptive_query_budget(summary: BatchSummary) -> int:
    """Without ``memory.max_queries``: one query per hacking behaviour and rubric gap,
    plus one for the trend, between 2 and 8."""
    behaviours = len(summary.aggregated_reward_hacking.behaviours)
    gaps = len(summary.rubric_meta_evaluation.gaps)
    return max(2, min(8, 1 + behaviours + gaps))


@llm_task("query_generator", "generate-queries", "generate-queries-{scope}")
async def generate_queries(
    step: int,
    scope: str,
    metadata: TrainerMetadata,
    criteria: list[AgentCriterion],
    summary: BatchSummary,
) -> list[str]:
    """Queries to search past analyses and updates with."""
    ctx = get_context()
    limit = ctx.settings.memory.max_queries or adaptive_query_budget(summary)
    data: QueryInput = {
        "step": step,
        "metadata": metadata,
        "max_queries": limit,
        "summary": summary,
    }
    plan = await ask(
        "query_generator",
        criteria_context(criteria),
        data,
        QueryPlan,
        step,
        at_most_items(QueryPlan, "queries", limit),
    )
    queries: list[str] = []
    for item in plan.queries:
        text = item.query.strip()
        if text and text not in queries:
            queries.append(text)
    return queries[:limit]
