"""How a step coordinator starts a step's run: a :class:`StepLauncher`.

Where the run executes is the launcher's business, not the coordinator's: in this process
(:class:`LocalLauncher`: the step flow on the pipeline loop), or as a run of the step
deployment that a replica's runner or a work pool's worker executes
(:class:`amaris.app.step_executor.DeploymentLauncher`). The composition root
(:mod:`amaris.app.wiring`) chooses one from the configuration (``pipeline.executor``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from amaris.steps.outcomes import StepRun

T = TypeVar("T")

StepFlow = Callable[[int], Awaitable[StepRun]]
"""The step flow, run in this process: what the step's coordinator is told."""


class StepLauncher(Protocol):
    """Starts a step's run; its outcome comes in a future."""

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        """Start the run of ``step`` (``new_attempt``: the previous attempt failed, or its
        executor died); the future holds its outcome, or the error it failed with
        (:class:`~amaris.steps.errors.StepRunFailedError` when it ended other than
        completed)."""
        ...


class Loop(Protocol):
    """Where :class:`LocalLauncher` runs the flow: :class:`amaris.steps.runner.PipelineRunner`
    (named here by its shape: the coordinator imports this module, which needs no Prefect)."""

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]: ...


class LocalLauncher:
    """Runs the step flow in this process, on the pipeline loop. A new attempt is the same
    call: the flow reuses the finished work of the earlier one."""

    def __init__(self, runner: Loop, flow: StepFlow) -> None:
        self._runner = runner
        self._flow = flow

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        return self._runner.submit(self._call(step))

    async def _call(self, step: int) -> StepRun:
        return await self._flow(step)
