"""Load a step's rollouts from the rollout log."""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from amaris.pipeline.context import get_context


@task(name="load-rollouts", cache_policy=NO_CACHE, task_run_name="load-rollouts-step-{step}")
async def load_step_rollouts(step: int) -> list[dict[str, Any]]:
    """Every rollout logged for ``step``; a rollout id sent twice keeps its last record."""
    ctx = get_context()
    records = await asyncio.to_thread(ctx.rollouts.load_step, step)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        if record.get("late"):
            continue  # arrived after the step was completed: logged, not analysed
        latest[(record["scope"], record["rollout"]["id"])] = record
    return sorted(latest.values(), key=lambda r: int(r["seq"]))
