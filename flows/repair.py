"""The repair flow: find steps whose pipeline failed or crashed and re-run them.

It talks to the amaris API (the process that owns the data), so it can run
anywhere: by hand (``amaris repair``), or on a schedule from the deployment in
``deployments/repair.py``, whose runs execute in subprocesses.

Its only target is the service that started it: the address comes from
``AMARIS_REPAIR_URL`` and the bearer key from ``AMARIS_API_KEY``, both set in the
environment by ``amaris serve`` (or ``amaris repair``). Neither is a flow parameter:
whoever may create a run of the deployment must not be able to send the key elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import re
import time

import httpx
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort
from pydantic import BaseModel, ConfigDict

_STEP_RUN = re.compile(r"^step-(\d+)$")


class Waited(BaseModel):
    """``GET /rubric_status/wait``'s answer, of which the repair reads the status."""

    model_config = ConfigDict(extra="allow", frozen=True)

    status: str
    """``updated``, ``unchanged``, ``rejected`` (the step ran), ``failed`` or ``pending``."""


def _amaris_api(timeout: float) -> httpx.AsyncClient:
    """A client of the amaris API this flow repairs, with its bearer key if it has one."""
    url = os.environ.get("AMARIS_REPAIR_URL")
    if not url:
        raise RuntimeError(
            "AMARIS_REPAIR_URL is not set: the repair flow runs under "
            "`amaris serve` (scheduled) or `amaris repair`"
        )
    key = os.environ.get("AMARIS_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # No redirects: the key goes to that address and nowhere else.
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout, follow_redirects=False)


@task(name="find-broken-steps", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=5)
async def find_broken_steps() -> list[int]:
    """Steps amaris reports failed, plus steps whose ``step-<N>`` flow run Prefect shows
    FAILED or CRASHED while amaris does not show them done or running."""

    async with _amaris_api(timeout=30) as http:
        response = await http.get("/steps")
        response.raise_for_status()
        statuses = {int(s["step"]): s["status"] for s in response.json()}
    broken = {step for step, status in statuses.items() if status == "failed"}
    async with get_client() as prefect:
        runs = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=[StateType.FAILED, StateType.CRASHED])
                )
            ),
            sort=FlowRunSort.START_TIME_DESC,
            limit=200,
        )
    for run in runs:
        match = _STEP_RUN.match(run.name or "")
        if match and statuses.get(int(match.group(1))) == "failed":
            broken.add(int(match.group(1)))
    return sorted(broken)


@task(name="rerun-step", cache_policy=NO_CACHE, task_run_name="rerun-step-{step}")
async def rerun_step(step: int, wait_seconds: float) -> Waited:
    """Ask amaris to re-run ``step`` and wait for its outcome (``wait_seconds`` at most:
    the server answers ``pending`` at its own ``server.max_wait_seconds``, so ask again)."""
    deadline = time.monotonic() + wait_seconds
    async with _amaris_api(timeout=wait_seconds + 30) as http:
        # No body, but declared JSON: amaris refuses a POST that a web page's form could send.
        started = await http.post(
            f"/steps/{step}/rerun", headers={"Content-Type": "application/json"}
        )
        started.raise_for_status()
        while True:
            left = deadline - time.monotonic()
            done = await http.get(
                "/rubric_status/wait", params={"step": step, "timeout": max(left, 0.001)}
            )
            done.raise_for_status()
            result = Waited.model_validate_json(done.content)
            if result.status != "pending" or left <= 0:
                return result


@flow(name="amaris-repair", flow_run_name="repair")
async def repair_steps(wait_seconds: float = 1800) -> dict[int, str]:
    """Re-run every broken step of the service ``AMARIS_REPAIR_URL`` names; returns the
    outcome per step."""
    logger = get_run_logger()
    steps = await find_broken_steps()
    if not steps:
        logger.info("no failed steps")
        return {}
    results = await asyncio.gather(*(rerun_step(s, wait_seconds) for s in steps))
    outcome = {step: r.status for step, r in zip(steps, results, strict=True)}
    logger.info("repair outcome: %s", outcome)
    return outcome
