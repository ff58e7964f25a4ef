"""Step flows as runs of the ``amaris-step/steps`` deployment (``pipeline.executor:
deployment``).

Several API replicas share one Qdrant server and one Prefect server. Any of them may see
a step complete (its count reach ``pipeline.rollouts_per_step``, or ``/complete``); it
submits the step with :func:`deployments.steps.submit_step`, whose idempotency key
``step-<N>-<attempt>`` makes Prefect hold one run per attempt however many replicas ask.
Prefect's own machinery executes the run: the Runner each replica serves the deployment
with, or the workers of ``pipeline.work_pool``. The replicas that submitted a run follow
its state and record how it ended in the shared step registry, where every replica's
``/rubric_status/wait`` reads it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.runner import Runner

from amaris.memory.rollout_log import StepRegistry
from amaris.steps.errors import StepRunFailedError
from amaris.steps.outcomes import StepRun, recorded_scopes
from amaris.steps.runner import PipelineRunner
from deployments.steps import add_steps, register_steps, submit_step

log = logging.getLogger("amaris.pipeline")

POLL_SECONDS = 0.5


class DeploymentExecutor:
    """Submits step runs and follows them, on the pipeline loop; without a work pool, also
    serves the step deployment with a Prefect :class:`~prefect.runner.Runner`."""

    def __init__(
        self,
        steps: StepRegistry,
        replica: str,
        poll_seconds: float = POLL_SECONDS,
        work_pool: str | None = None,
    ) -> None:
        """``work_pool``: the deployment's Prefect work pool; its workers, not this
        replica's runner, execute the steps."""
        self._work_pool = work_pool
        self._steps = steps
        self.replica = replica
        self._poll_seconds = poll_seconds
        self._ready = asyncio.Event()
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Register the deployment (idempotent); without a work pool, serve it until the
        pipeline loop stops."""
        if self._work_pool is not None:
            await register_steps(self._work_pool)
        else:
            name = "".join("-" if ch in "/%" else ch for ch in f"amaris-{self.replica}")
            runner = Runner(name=name, pause_on_shutdown=False)
            await add_steps(runner)
            self._serving = asyncio.create_task(runner.start(), name="amaris-step-runner")
        self._ready.set()

    async def run(self, step: int, new_attempt: bool = False) -> StepRun:
        """Have ``step`` run (once across replicas) and wait for its outcome.

        ``new_attempt``: the previous attempt failed or its executor died; start another.

        Raises:
            StepRunFailedError: the run ended other than Completed (or another replica
                recorded the step failed).
        """
        await self._ready.wait()
        record = await asyncio.to_thread(self._steps.get, step)
        attempt = ((record.attempt or 0) if record else 0) + (1 if new_attempt else 0)
        run = await submit_step(step, attempt)
        # ``executor``: the replica that started this attempt; its restart starts the next
        # one if the step is still ``completing`` then. Only that replica records the
        # attempt: a replica that only watches read the record before its executor may
        # have started a later attempt, and writing its older number back would undo it.
        if new_attempt or record is None or not record.executor:
            await asyncio.to_thread(
                self._steps.set,
                step,
                attempt=attempt,
                flow_run_id=str(run.id),
                executor=self.replica,
            )
        log.info("replica %s submitted step %s (flow run %s)", self.replica, step, run.id)
        return await self._follow(step, run.id)

    async def _follow(self, step: int, flow_run_id: UUID) -> StepRun:
        """The step's outcome once its run ends, or once the registry has one (another
        replica recorded it, or a later attempt ended). One Prefect client for the whole
        wait: a new one builds a TLS context, which is costly (``amaris/readiness.py``)."""
        async with get_client() as client:
            while True:
                state = (await client.read_flow_run(flow_run_id)).state
                if state is not None and state.is_final():
                    if not state.is_completed():
                        message = f"step run ended {state.type.value}: {state.message}"
                        raise StepRunFailedError(message)
                    break
                record = await asyncio.to_thread(self._steps.get, step)
                if record is not None and record.status == "done":
                    break
                if record is not None and record.status == "failed":
                    raise StepRunFailedError(record.error or "step failed")
                await asyncio.sleep(self._poll_seconds)
        # The flow stored its scopes in the registry: its result lives in the storage of
        # the process that ran it, which this replica may not reach.
        final = await asyncio.to_thread(self._steps.get, step)
        return StepRun(step=step, scopes=recorded_scopes(final) if final is not None else None)


class DeploymentLauncher:
    """The :class:`~amaris.steps.launcher.StepLauncher` of ``pipeline.executor:
    deployment``: each step a run of the step deployment, followed on the pipeline loop."""

    def __init__(self, runner: PipelineRunner, executor: DeploymentExecutor) -> None:
        self._runner = runner
        self._executor = executor

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        return self._runner.submit(self._executor.run(step, new_attempt))
