"""A full disk under the step lifecycle: a step's status changes only
after its durable write succeeded, so a refused write leaves it retryable, and the
failure is recorded (``/healthz``) and raised as
:class:`~amaris.memory.storage_health.StorageUnavailableError` (``/score``, ``/complete``:
503).

Real parts: the SQLite rollout log and the step registry on Qdrant in memory, each
wrapped at its storage seam to refuse writes with ``ENOSPC`` / SQLite's "database or disk
is full" while the test fills the disk. The coordinator under test is the real one. Needs
no fixture of tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence

import pytest
from qdrant_client import QdrantClient

from amaris.memory.models import StepRecord
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import StepRegistry
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog
from amaris.memory.storage_health import StorageUnavailableError
from amaris.settings import load_settings
from amaris.steps.coordinator import StepCoordinator
from amaris.steps.outcomes import StepRun
from tests.support.step_runs import scope_outcome, settled

DEADLINE_S = 30.0
"""Generous bound of the waits below (never part of an assertion)."""


class Disk:
    """Whether a simulated disk is full."""

    full = False


class Disks:
    """The rollout log's and the registry's disks; ``full`` sets both."""

    def __init__(self) -> None:
        self.log, self.registry = Disk(), Disk()

    @property
    def full(self) -> bool:
        return self.log.full and self.registry.full

    @full.setter
    def full(self, value: bool) -> None:
        self.log.full = self.registry.full = value


class FullableRegistry(StepRegistry):
    """The real step registry; its writes fail with ENOSPC while the disk is full."""

    def __init__(self, client: QdrantClient, prefix: str, disk: Disk) -> None:
        super().__init__(client, prefix)
        self._disk = disk

    def set(self, step: int, **fields: object) -> StepRecord:
        if self._disk.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "storage.sqlite")
        return super().set(step, **fields)


class FullableLog(SqliteRolloutLog):
    """The real SQLite rollout log; its writes fail as SQLite fails on a full disk."""

    def __init__(self, disk: Disk) -> None:
        super().__init__(":memory:", "t")
        self._disk = disk

    def append_many(self, items: Sequence[tuple[int, RolloutRecord]]) -> list[int]:
        if self._disk.full:
            raise sqlite3.OperationalError("database or disk is full")
        return super().append_many(items)


class World:
    def __init__(self) -> None:
        self.disk = Disks()
        self.qdrant = QdrantClient(":memory:")
        self.registry = FullableRegistry(self.qdrant, "t", self.disk.registry)
        self.log = FullableLog(self.disk.log)
        self.starts: list[tuple[int, bool]] = []
        self.runs: dict[int, concurrent.futures.Future[StepRun]] = {}
        self.done: list[int] = []

        async def on_done(step: int) -> None:
            self.done.append(step)

        self.coordinator = StepCoordinator(
            load_settings(None), self.log, self.registry, self, on_done=on_done
        )

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        """The coordinator's launcher: the test settles each run."""
        self.starts.append((step, new_attempt))
        self.runs[step] = concurrent.futures.Future()
        return self.runs[step]

    def stored_status(self, step: int) -> str | None:
        record = self.registry.get(step)
        return None if record is None else str(record.status)


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = World()
    yield w
    await w.coordinator.close()
    w.log.close()
    w.qdrant.close()


def scored(rid: str) -> RolloutRecord:
    return RolloutRecord.model_validate(
        {"rollout": {"id": rid, "input": "2+2?", "output": "4"}, "score": 1.0, "scope": "global"}
    )


async def test_complete_on_a_full_disk_leaves_the_step_open_and_retryable(world: World) -> None:
    c = world.coordinator
    await c.record(0, scored("a"))
    world.disk.full = True
    with pytest.raises(StorageUnavailableError) as refused:
        await c.complete(0)
    assert refused.value.store == "step registry"
    assert "No space left on device [ENOSPC]" in str(refused.value)
    # Nothing changed: open here and in the registry, no run started.
    assert (c.status(0), world.stored_status(0), world.starts) == ("open", "open", [])
    assert "No space left on device" in c.storage.problems()["step registry"]

    world.disk.full = False
    assert await c.complete(0) == "complete"
    await settled()
    assert (c.status(0), world.stored_status(0), world.starts) == (
        "completing",
        "completing",
        [(0, False)],
    )
    assert c.storage.problems() == {}


async def test_a_rollout_on_a_full_disk_is_refused_and_not_counted(world: World) -> None:
    c = world.coordinator
    world.disk.full = True
    with pytest.raises(StorageUnavailableError, match=r"rollout log: database or disk is full"):
        await c.record(0, scored("a"))
    assert (c.status(0), world.stored_status(0), world.log.count(0), c.counts()) == (
        None,
        None,
        0,
        {},
    )
    assert set(c.storage.problems()) == {"rollout log"}

    world.disk.full = False
    await c.record(0, scored("a"))
    assert (c.status(0), world.stored_status(0), world.log.count(0), c.counts()) == (
        "open",
        "open",
        1,
        {0: 1},
    )
    assert c.storage.problems() == {}


async def test_an_outcome_the_disk_refuses_leaves_the_step_failed_and_retryable(
    world: World,
) -> None:
    c = world.coordinator
    await c.record(0, scored("a"))
    await c.complete(0)
    await settled()
    world.disk.full = True
    world.runs[0].set_result(StepRun(step=0, scopes={"global": scope_outcome("unchanged")}))
    async with asyncio.timeout(DEADLINE_S):
        answer = await c.wait(0)
    assert answer.status == "failed" and answer.error is not None
    assert "done outcome could not be recorded" in answer.error
    assert "ENOSPC" in answer.error
    assert world.done == []  # the step's after-work (retention) waits for a recorded outcome
    assert world.stored_status(0) == "completing"  # a restart would resume it

    world.disk.full = False
    assert await c.complete(0) == "complete"
    await settled()
    assert world.starts == [(0, False), (0, True)]
    world.runs[0].set_result(StepRun(step=0, scopes={}))
    async with asyncio.timeout(DEADLINE_S):
        assert (await c.wait(0)).status == "unchanged"  # no scope
    assert (world.stored_status(0), world.done) == ("done", [0])


async def test_a_new_step_the_registry_refuses_is_registered_by_its_next_rollout(
    world: World,
) -> None:
    """The rollout log takes the rollout, the registry refuses the new step: the answer is a
    503 (the client retries the same rollout: logged again, the pipeline keeps the last
    record of an id) and the step is registered by the next rollout that gets through."""
    c = world.coordinator
    world.disk.registry.full = True
    with pytest.raises(StorageUnavailableError, match="step registry"):
        await c.record(0, scored("a"))
    assert (c.status(0), world.stored_status(0), world.log.count(0)) == (None, None, 1)
    world.disk.registry.full = False
    await c.record(0, scored("a"))
    assert (c.status(0), world.stored_status(0)) == ("open", "open")
