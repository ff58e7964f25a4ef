"""Where a step coordinator learns what other processes did to steps.

The coordinator keeps step statuses and rollout counts in memory and writes every change
to the step registry. Whether it must also read back what others wrote is configuration,
not a second code path: one replica (``pipeline.executor: local``) is the only writer, so
its memory is the whole truth (:class:`InProcess`); several replicas of one store
(``deployment``) log and complete steps too, so counts and statuses come from the shared
store (:class:`SharedStore`).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from amaris.memory.models import StepRecord
from amaris.memory.rollout_log import RolloutLog, StepRegistry


class StepStore(Protocol):
    """Step counts and statuses as other processes left them."""

    async def get(self, step: int) -> StepRecord | None:
        """The step's registry record as others may have changed it; None: nothing beyond
        what this process knows."""
        ...

    async def entries(self) -> list[StepRecord]:
        """Every step's record others may have written (steps they opened or ran)."""
        ...

    async def count(self, step: int, counted: int) -> int:
        """Rollouts of ``step``, given the ``counted`` ones this process logged."""
        ...


class InProcess:
    """One replica: no other process writes steps; nothing to read back."""

    async def get(self, step: int) -> StepRecord | None:
        return None

    async def entries(self) -> list[StepRecord]:
        return []

    async def count(self, step: int, counted: int) -> int:
        return counted


class SharedStore:
    """Several replicas: the shared registry and rollout log hold every replica's work."""

    def __init__(self, steps: StepRegistry, rollouts: RolloutLog) -> None:
        self._steps = steps
        self._rollouts = rollouts

    async def get(self, step: int) -> StepRecord | None:
        return await asyncio.to_thread(self._steps.get, step)

    async def entries(self) -> list[StepRecord]:
        return await asyncio.to_thread(self._steps.list, None, 10_000)

    async def count(self, step: int, counted: int) -> int:
        # Every writer's rollouts: their counts are in the store.
        return await asyncio.to_thread(self._rollouts.count, step)
