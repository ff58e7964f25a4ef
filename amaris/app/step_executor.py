"""Step flows as Prefect deployment runs, served by every replica (``pipeline.executor:
deployment``).

Several API replicas share one Qdrant server and one Prefect server. Any of them may see
a step complete (its count reach ``pipeline.rollouts_per_step``, or ``/complete``); it
creates a run of the ``amaris-step/steps`` deployment with the idempotency key
``step-<N>-<attempt>``, so however many replicas ask, Prefect holds one run per attempt.
Each replica serves the deployment: it polls for scheduled runs and claims one by
proposing ``Pending`` (Prefect's orchestration accepts that once, exactly as for its own
workers), runs the flow in its pipeline thread, and records the outcome in the shared
step registry, where every replica's ``/rubric_status/wait`` reads it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.responses import SetStateStatus
from prefect.client.schemas.sorting import FlowRunSort
from prefect.flow_engine import run_flow_async
from prefect.states import Pending

from amaris.memory.rollout_log import StepRegistry
from flows.step_pipeline import step_pipeline

log = logging.getLogger("amaris.pipeline")

DEPLOYMENT_NAME = "steps"
POLL_SECONDS = 0.5


class StepFailed(RuntimeError):
    """The step's run ended in a state other than Completed."""


class DeploymentExecutor:
    """Submits step runs and serves the step deployment, on the pipeline loop."""

    def __init__(
        self,
        steps: StepRegistry,
        replica: str,
        on_done: Callable[[int], Coroutine[Any, Any, None]] | None = None,
        poll_seconds: float = POLL_SECONDS,
        work_pool: str | None = None,
    ) -> None:
        """``work_pool``: the deployment's Prefect work pool; its workers, not this
        replica, run the steps, and the replica that submitted a run records its end."""
        self._work_pool = work_pool
        self._steps = steps
        self.replica = replica
        self._on_done = on_done
        self._poll_seconds = poll_seconds
        self._deployment_id: UUID | None = None
        self._ready = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Register the deployment (idempotent) and serve it until cancelled."""

        deployment = await step_pipeline.ato_deployment(
            name=DEPLOYMENT_NAME,
            tags=["amaris"],
            description="One run per training step; served by the amaris replicas.",
        )
        self._deployment_id = await deployment.aapply(work_pool_name=self._work_pool)
        self._ready.set()
        if self._work_pool is None:
            task = asyncio.create_task(self._serve(), name="amaris-step-worker")
            self._running.add(task)

    async def run(self, step: int, new_attempt: bool = False) -> dict[str, Any]:
        """Have ``step`` run (once across replicas) and wait for its outcome.

        ``new_attempt``: the previous attempt failed or its executor died; start another.

        Raises:
            StepFailed: the run failed (its error is in the step registry).
        """

        await self._ready.wait()
        record = await asyncio.to_thread(self._steps.get, step) or {}
        attempt = int(record.get("attempt", 0)) + (1 if new_attempt else 0)
        if new_attempt:
            await asyncio.to_thread(self._steps.set, step, attempt=attempt)
        assert self._deployment_id is not None
        async with get_client() as client:
            run = await client.create_flow_run_from_deployment(
                self._deployment_id,
                parameters={"step": step},
                name=f"step-{step}",
                idempotency_key=f"step-{step}-{attempt}",
                tags=["amaris"],
            )
        await asyncio.to_thread(self._steps.set, step, flow_run_id=str(run.id))
        if self._work_pool is not None:
            await self._record_pool_run(step, run.id)
        return await self.wait_final(step)

    async def _record_pool_run(self, step: int, flow_run_id: UUID) -> None:
        """A work pool's worker ran the step: record how its run ended (every replica
        that submitted it writes the same outcome)."""

        started = time.monotonic()
        while True:
            async with get_client() as client:
                run = await client.read_flow_run(flow_run_id)
            state = run.state
            if state is not None and state.is_final():
                break
            await asyncio.sleep(self._poll_seconds)
        if state.is_completed():
            # The flow stored its outcome in the registry: its persisted result lives in the
            # worker's result storage, which this replica may not reach.
            await asyncio.to_thread(
                self._steps.set,
                step,
                status="done",
                error=None,
                duration_s=round(time.monotonic() - started, 3),
            )
            if self._on_done is not None:
                await self._on_done(step)
        else:
            await asyncio.to_thread(
                self._steps.set,
                step,
                status="failed",
                error=f"step run ended {state.type.value}: {state.message}",
            )

    async def wait_final(self, step: int) -> dict[str, Any]:
        """The step's outcome once the registry says ``done``; raises when ``failed``."""
        while True:
            record = await asyncio.to_thread(self._steps.get, step) or {}
            if record.get("status") == "done":
                return {"step": step, "scopes": record.get("scopes")}
            if record.get("status") == "failed":
                raise StepFailed(str(record.get("error") or "step failed"))
            await asyncio.sleep(self._poll_seconds)

    async def _serve(self) -> None:

        assert self._deployment_id is not None
        deployments = DeploymentFilter(id=DeploymentFilterId(any_=[self._deployment_id]))
        scheduled = FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
        )
        while True:
            try:
                async with get_client() as client:
                    runs = await client.read_flow_runs(
                        deployment_filter=deployments,
                        flow_run_filter=scheduled,
                        sort=FlowRunSort.EXPECTED_START_TIME_ASC,
                        limit=16,
                    )
                    for run in runs:
                        answer: Any = await client.set_flow_run_state(run.id, Pending())
                        if answer.status != SetStateStatus.ACCEPT:
                            continue  # another replica claimed it
                        task = asyncio.create_task(self._execute(run.id), name=f"step-run-{run.id}")
                        self._running.add(task)
                        task.add_done_callback(self._running.discard)
            except asyncio.CancelledError:
                raise
            except Exception:  # the Prefect API may be briefly away: keep serving
                log.exception("polling step runs failed; retrying")
            await asyncio.sleep(self._poll_seconds)

    async def _execute(self, flow_run_id: UUID) -> None:

        async with get_client() as client:
            run = await client.read_flow_run(flow_run_id)
        step = int(run.parameters["step"])
        await asyncio.to_thread(self._steps.set, step, executor=self.replica)
        started = time.monotonic()
        log.info("replica %s runs step %s (flow run %s)", self.replica, step, flow_run_id)
        try:
            state = await run_flow_async(
                step_pipeline, flow_run=run, parameters=run.parameters, return_type="state"
            )
            outcome = await state.result() if state.is_completed() else None  # type: ignore[union-attr]
            if outcome is None:
                raise StepFailed(f"step run ended {state.type.value}: {state.message}")  # type: ignore[union-attr]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = exc if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
            log.error("step %s failed: %s", step, error)
            await asyncio.to_thread(self._steps.set, step, status="failed", error=str(error))
            return
        await asyncio.to_thread(
            self._steps.set,
            step,
            status="done",
            error=None,
            scopes=outcome.get("scopes"),
            duration_s=round(time.monotonic() - started, 3),
        )
        if self._on_done is not None:
            await self._on_done(step)

    async def close(self) -> None:
        """Stop serving; a run cut short stays ``completing`` for its replica's restart."""
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
