"""Summarizer: one batch summary per chunk of analyses."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.context import TaskRunContext

from amaris.agents.schemas import BatchSummary
from amaris.pipeline.context import get_context
from amaris.pipeline.retry import digest, retry_on_transient
from amaris.prompts import data_message
from tasks._common import messages


def _key(context: TaskRunContext, params: dict[str, Any]) -> str:
    ctx = get_context()
    return "summarize-" + digest(ctx.namespace, params, ctx.prompt_fingerprint("summarizer"))


@task(name="summarize", cache_key_fn=_key, persist_result=True,
      retry_condition_fn=retry_on_transient, task_run_name="summarize-{scope}-chunk-{chunk}")
async def summarize_chunk(
    step: int,
    scope: str,
    chunk: int,
    metadata: dict[str, Any],
    criteria: list[dict[str, Any]],
    analyses: list[dict[str, Any]],
) -> dict[str, Any]:
    """Summarise a chunk of a step's analyses (each carrying its rollout's ``score``)."""
    ctx = get_context()
    scores = [a["score"] for a in analyses if a.get("score") is not None]
    stats = {
        "count": len(analyses),
        "scored": len(scores),
        "mean": round(sum(scores) / len(scores), 4) if scores else None,
        "min": min(scores) if scores else None,
        "max": max(scores) if scores else None,
    }
    payload = {"step": step, "metadata": metadata, "criteria": criteria, "score_stats": stats,
               "analyses": analyses}
    summary = await ctx.gateway.structured(
        "summarizer",
        messages(ctx.prompts["summarizer"], data_message("summarizer", payload)),
        BatchSummary,
        step=step,
    )
    return summary.model_dump(mode="json")
