"""Analyzer: one deep analysis per rollout."""

from __future__ import annotations

from typing import Any

from prefect import task

from amaris.agents.schemas import IndividualAnalysis
from amaris.pipeline.retry import retry_on_transient
from tasks._common import ask, cache_key


@task(name="analyze", cache_key_fn=cache_key("analyzer"), persist_result=True,
      retry_condition_fn=retry_on_transient, task_run_name="analyze-{record[rollout][id]}")
async def analyze_rollout(
    record: dict[str, Any], criteria: list[dict[str, Any]], group: list[dict[str, Any]]
) -> dict[str, Any]:
    """Analyse one logged rollout: reward hacking, progress, rubric fit."""
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
    analysis = await ask("analyzer", payload, IndividualAnalysis, record["step"])
    result = analysis.model_dump(mode="json")
    result["rollout_id"] = rollout["id"]
    return result
