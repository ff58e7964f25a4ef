"""MetaSummarizer: consolidate the chunk summaries of a large step."""

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
    return "meta-" + digest(ctx.namespace, params, ctx.prompt_fingerprint("meta_summarizer"))


@task(name="meta-summarize", cache_key_fn=_key, persist_result=True,
      retry_condition_fn=retry_on_transient, task_run_name="meta-summarize-{scope}")
async def meta_summarize(
    step: int,
    scope: str,
    metadata: dict[str, Any],
    criteria: list[dict[str, Any]],
    summaries: list[dict[str, Any]],
) -> dict[str, Any]:
    """One summary of the whole step from its chunk summaries."""
    ctx = get_context()
    payload = {"step": step, "metadata": metadata, "criteria": criteria, "summaries": summaries}
    summary = await ctx.gateway.structured(
        "meta_summarizer",
        messages(ctx.prompts["meta_summarizer"], data_message("meta_summarizer", payload)),
        BatchSummary,
        step=step,
    )
    return summary.model_dump(mode="json")
