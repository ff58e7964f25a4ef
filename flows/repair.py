"""The repair flow: find steps whose pipeline failed or crashed and re-run them.

It talks to the amaris API (the process that owns the data), so it can run
anywhere: by hand (``amaris repair``), or on a schedule from the deployment in
``deployments/repair.py``, whose runs execute in subprocesses.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import httpx
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

_STEP_RUN = re.compile(r"^step-(\d+)$")


@task(name="find-broken-steps", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5)
async def find_broken_steps(api_url: str, api_key: str | None) -> list[int]:
    """Steps amaris reports failed, plus steps whose ``step-<N>`` flow run Prefect shows
    FAILED or CRASHED while amaris does not show them done or running."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=api_url, headers=headers, timeout=30) as http:
        response = await http.get("/steps")
        response.raise_for_status()
        statuses = {int(s["step"]): s["status"] for s in response.json()}
    broken = {step for step, status in statuses.items() if status == "failed"}
    async with get_client() as prefect:
        runs = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
                any_=[StateType.FAILED, StateType.CRASHED]))),
            sort=FlowRunSort.START_TIME_DESC, limit=200,
        )
    for run in runs:
        match = _STEP_RUN.match(run.name or "")
        if match and statuses.get(int(match.group(1))) == "failed":
            broken.add(int(match.group(1)))
    return sorted(broken)


@task(name="rerun-step", cache_policy=NO_CACHE, task_run_name="rerun-step-{step}")
async def rerun_step(api_url: str, api_key: str | None, step: int,
                     wait_seconds: float) -> dict[str, Any]:
    """Ask amaris to re-run ``step`` and wait for its outcome."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(base_url=api_url, headers=headers,
                                 timeout=wait_seconds + 30) as http:
        started = await http.post(f"/steps/{step}/rerun")
        started.raise_for_status()
        done = await http.get("/rubric_status/wait",
                              params={"step": step, "timeout": wait_seconds})
        done.raise_for_status()
        result: dict[str, Any] = done.json()
        return result


@flow(name="amaris-repair", flow_run_name="repair")
async def repair_steps(api_url: str, api_key: str | None = None,
                       wait_seconds: float = 1800) -> dict[int, str]:
    """Re-run every broken step; returns the outcome per step.

    ``api_key`` defaults to ``AMARIS_API_KEY`` from the environment, so the key never
    has to be a deployment parameter (parameters are visible in the UI).
    """
    logger = get_run_logger()
    api_key = api_key or os.environ.get("AMARIS_API_KEY")
    steps = await find_broken_steps(api_url, api_key)
    if not steps:
        logger.info("no failed steps")
        return {}
    results = await asyncio.gather(*(rerun_step(api_url, api_key, s, wait_seconds)
                                     for s in steps))
    outcome = {step: str(r.get("status")) for step, r in zip(steps, results, strict=True)}
    logger.info("repair outcome: %s", outcome)
    return outcome
