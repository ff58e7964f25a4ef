"""Analyzer: one deep analysis per rollout."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.context import TaskRunContext

from amaris.agents.schemas import IndividualAnalysis
from amaris.pipeline.context import get_context
from amaris.pipeline.retry import digest, retry_on_transient
from amaris.prompts import data_message
from tasks._common import messages


def _key(context: TaskRunContext, params: dict[str, Any]) -> str:
    ctx = get_context()
    record = params["record"]
    return "analyze-" + digest(
        ctx.namespace, record["step"], record["scope"], record["seq"], record["rollout"],
        params["criteria"], params["group"], ctx.prompt_fingerprint("analyzer"),
    )


@task(name="analyze", cache_key_fn=_key, persist_result=True,
      retry_condition_fn=retry_on_transient, task_run_name="analyze-{record[rollout][id]}")
async def analyze_rollout(
    record: dict[str, Any], criteria: list[dict[str, Any]], group: list[dict[str, Any]]
) -> dict[str, Any]:
    """Analyse one logged rollout: reward hacking, progress, rubric fit."""
    ctx = get_context()
    rollout = record["rollout"]
    payload = {
        "rollout": {
            "id": rollout["id"],
            "input": rollout["input"],
            "output": rollout["output"],
            "supplemental_context": rollout.get("supplemental_context"),
        },
        "metadata": record.get("metadata") or {},
        "score": record.get("score"),
        "verdicts": record.get("verdicts") or [],
        "criteria": criteria,
        "group": group,
    }
    analysis = await ctx.gateway.structured(
        "analyzer",
        messages(ctx.prompts["analyzer"], data_message("analyzer", payload)),
        IndividualAnalysis,
        step=record["step"],
    )
    result = analysis.model_dump(mode="json")
    result["rollout_id"] = rollout["id"]
    return result
