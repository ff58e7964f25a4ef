"""The step lifecycle (:class:`StepCoordinator`, :func:`enforce_retention`) through its public
methods: step bounds and admission, rollouts logged and counted, steps completed once,
outcomes recorded and waited for, a restart resumed, several replicas over one store, and
retention. Real parts: the rollout log (SQLite in memory), the step registry and memory on
Qdrant in memory. The step's flow is started through the coordinator's seam, a
:class:`~amaris.steps.launcher.StepLauncher`: :class:`Runs` records each start and the test
settles its outcome. Needs no fixture of
tests/conftest.py (mutation testing runs it with ``--noconftest``: bench/evaluations/mutation.py
``step_lifecycle``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.memory.embedder import HashingEmbedder
from amaris.memory.records import RolloutRecord
from amaris.memory.retention import enforce_retention
from amaris.memory.rollout_log import StepRegistry
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog
from amaris.memory.store import MemoryStore
from amaris.settings import Settings, load_settings
from amaris.steps.coordinator import (
    StepCoordinator,
    StepRefusedError,
    StepRunFailedError,
    UnknownStepError,
)
from amaris.steps.outcomes import (
    ScopeOutcome,
    ScopeOutcomes,
    StepRun,
    UpdateKind,
    WaitResult,
    scopes_json,
)
from amaris.steps.store import SharedStore
from tests.support.step_runs import settled

DEADLINE_S = 30.0
"""Generous bound of every wait below, all in one event loop (never part of an assertion)."""


def scope(outcome: UpdateKind, reason: str | None = None) -> ScopeOutcome:
    """A scope's outcome in a run (the coordinator reads its ``outcome``)."""
    return ScopeOutcome(
        outcome=outcome,
        version=1,
        base_version=1,
        reason=reason,
        rollouts=1,
        hacking=[],
        dropped=[],
    )


PUBLISHED = {"global": scope("published")}
"""A run's outcome per scope: one scope published."""
MIXED = {"global": scope("unchanged"), "in-7": scope("rejected", "canary")}
"""Two scopes, one unchanged and one rejected: the step was rejected."""


class Runs:
    """The coordinator's launcher: records every start; the test settles each run's outcome."""

    def __init__(self) -> None:
        self.starts: list[tuple[int, bool]] = []
        self.runs: dict[int, concurrent.futures.Future[StepRun]] = {}
        self._started = asyncio.Event()

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        self.starts.append((step, new_attempt))
        self.runs[step] = concurrent.futures.Future()
        self._started.set()
        return self.runs[step]

    async def started(self, count: int) -> None:
        """Until ``count`` runs have started."""
        async with asyncio.timeout(DEADLINE_S):
            while len(self.starts) < count:
                self._started.clear()
                await self._started.wait()

    def finish(self, step: int, scopes: ScopeOutcomes | None = None) -> None:
        self.runs[step].set_result(
            StepRun(step=step, scopes=PUBLISHED if scopes is None else scopes)
        )

    def fail(self, step: int, error: Exception) -> None:
        self.runs[step].set_exception(error)


class Store:
    """One store (registry + rollout log) that replicas share."""

    def __init__(self) -> None:
        self.qdrant = QdrantClient(":memory:")
        self.registry = StepRegistry(self.qdrant, "t")
        self.log = SqliteRolloutLog(":memory:", "t")
        self.coordinators: list[StepCoordinator] = []

    def coordinator(
        self,
        runs: Runs,
        config: dict[str, Any] | None = None,
        *,
        shared: bool = False,
        replica: str = "",
        on_done: Callable[[int], Coroutine[Any, Any, None]] | None = None,
        on_finished: Callable[[str, float], None] | None = None,
        after_wake: Callable[[], None] | None = None,
    ) -> StepCoordinator:
        """A replica over this store (``shared``: it reads what the others wrote)."""
        coordinator = StepCoordinator(
            settings(**(config or {})),
            self.log,
            self.registry,
            runs,
            on_done=on_done,
            on_finished=on_finished,
            store=SharedStore(self.registry, self.log) if shared else None,
            replica=replica,
            after_wake=after_wake,
        )
        self.coordinators.append(coordinator)
        return coordinator

    def status(self, step: int) -> str | None:
        record = self.registry.get(step)
        return None if record is None else str(record.status)


def settings(**overrides: Any) -> Settings:
    return load_settings(None, **overrides)


def scored(rid: str, scope: str = "global") -> RolloutRecord:
    return RolloutRecord.model_validate(
        {"rollout": {"id": rid, "input": "2+2?", "output": "4"}, "score": 1.0, "scope": scope}
    )


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    world = Store()
    yield world
    for coordinator in world.coordinators:
        await coordinator.close()
    world.log.close()
    world.qdrant.close()


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(DEADLINE_S):
        while not condition():
            await asyncio.sleep(0)


# -- bounds ----------------------------------------------------------------------------
async def refusal(coordinator: StepCoordinator, step: int) -> StepRefusedError:
    with pytest.raises(StepRefusedError) as refused:
        await coordinator.check(step)
    return refused.value


async def test_steps_past_max_step_are_refused(store: Store) -> None:
    c = store.coordinator(Runs(), {"pipeline.max_step": 7})
    error = await refusal(c, 8)
    assert (error.reason, error.field) == ("out_of_range", "metadata.current_step")
    assert "is over pipeline.max_step (7)" in str(error)
    await c.check(7)
    await c.record(7, scored("r"))
    assert (await refusal(c, 8)).reason == "out_of_range"  # a known newest step aside
    with pytest.raises(StepRefusedError) as completed:
        await c.complete(8)
    assert (completed.value.reason, completed.value.field) == ("out_of_range", "step")
    assert (await refusal_of_complete(c, 6)).reason == "not_next"
    assert await c.complete(7) == "complete"


async def test_a_new_step_is_at_most_max_steps_ahead_of_the_newest(store: Store) -> None:
    c = store.coordinator(Runs(), {"pipeline.max_steps_ahead": 3})
    await c.check(40)  # the first step may be anywhere (a run resumed from a checkpoint)
    await c.record(40, scored("r"))
    await c.check(43)
    error = await refusal(c, 44)
    assert error.reason == "out_of_range"
    assert "step 44 is more than pipeline.max_steps_ahead (3) past the newest step (40)" in str(
        error
    )
    await c.check(0)  # behind the newest step: fine
    await c.record(43, scored("r2"))
    await c.check(46)


async def test_at_most_max_open_steps_are_open(store: Store) -> None:
    runs = Runs()
    c = store.coordinator(runs, {"pipeline.max_open_steps": 2})
    await c.record(0, scored("a"))
    await c.record(1, scored("b"))
    error = await refusal(c, 2)
    assert error.reason == "too_many_open"
    assert "step 2 would open one more step; 2 are open (pipeline.max_open_steps)" in str(error)
    await c.check(1)  # an open step takes more rollouts
    await c.complete(0)
    await c.check(2)  # step 0 is no longer open
    await c.check(0)  # and still known


async def test_a_step_being_admitted_counts_as_open_until_its_rollouts_leave(
    store: Store,
) -> None:
    c = store.coordinator(Runs(), {"pipeline.max_open_steps": 1})
    async with c.admission(5):
        async with c.admission(5):
            assert (await refusal(c, 6)).reason == "too_many_open"
        # One of the two rollouts is still on its way to step 5.
        assert (await refusal(c, 6)).reason == "too_many_open"
        await c.check(5)
    await c.check(6)  # neither rollout was logged: step 5 never opened
    assert c.snapshot() == {}
    async with c.admission(6):
        await c.record(6, scored("r"))
    async with c.admission(6):  # a known step
        await c.check(6)
    assert (await refusal(c, 7)).reason == "too_many_open"


async def test_admission_refuses_before_the_block_runs(store: Store) -> None:
    c = store.coordinator(Runs(), {"pipeline.max_step": 3})
    entered = []
    with pytest.raises(StepRefusedError):
        async with c.admission(4):
            entered.append(4)
    assert entered == []
    await c.check(4 - 1)


async def test_steps_another_replica_opened_count_towards_the_bounds(store: Store) -> None:
    bounds = {"pipeline.max_open_steps": 2, "pipeline.max_step": 9}
    other = store.coordinator(Runs(), bounds, shared=True, replica="b")
    await other.record(0, scored("a"))
    await other.record(1, scored("b"))
    for step in (9, 5):  # max_step itself included
        # Unknown to a new replica: looked up in the store.
        mine = store.coordinator(Runs(), bounds, shared=True, replica="a")
        assert (await refusal(mine, step)).reason == "too_many_open"
        assert mine.snapshot() == {0: "open", 1: "open"}


# -- rollouts --------------------------------------------------------------------------
async def test_a_rollout_is_logged_with_its_step_and_opens_the_step(store: Store) -> None:
    c = store.coordinator(Runs())
    before = time.time()
    await c.record(3, scored("r1"))
    await c.record(3, scored("r2"))
    after = time.time()
    logged = store.log.load_step(3)
    assert [(r.rollout.id, r.step, r.late, r.score) for r in logged] == [
        ("r1", 3, False, 1.0),
        ("r2", 3, False, 1.0),
    ]
    assert all(r.time is not None and before <= r.time <= after for r in logged)
    assert c.status(3) == "open"
    assert store.status(3) == "open"
    assert c.counts() == {3: 2}
    assert c.status(4) is None


async def test_a_step_completes_by_itself_at_rollouts_per_step(store: Store) -> None:
    runs = Runs()
    c = store.coordinator(runs, {"pipeline.rollouts_per_step": 3})
    await c.record(0, scored("r1"))
    await c.record(0, scored("r2"))
    assert (c.status(0), runs.starts) == ("open", [])
    await c.record(0, scored("r3"))
    await runs.started(1)
    assert runs.starts == [(0, False)]
    assert c.status(0) == "completing"
    record = store.registry.get(0)
    assert record is not None
    assert (record.status, record.rollout_count, record.error) == ("completing", 3, None)
    assert await c.complete(0) == "noop"  # steps complete by themselves
    assert await c.complete() == "noop"
    await c.record(0, scored("late"))  # after completion: logged, flagged, not counted
    assert [r.late for r in store.log.load_step(0)] == [False, False, False, True]
    assert c.counts() == {0: 3}
    runs.finish(0)
    assert (await c.wait(0, timeout=DEADLINE_S)).status == "updated"
    assert c.counts() == {}
    await c.record(0, scored("later"))
    assert store.log.load_step(0)[-1].late is True
    assert runs.starts == [(0, False)]


async def test_rollouts_racing_past_the_threshold_start_the_step_once(store: Store) -> None:
    # All eight read the step as open before any is logged (they share one batched write),
    # so all of them count towards the threshold: one start, however many reach it.
    runs = Runs()
    c = store.coordinator(runs, {"pipeline.rollouts_per_step": 2})
    await asyncio.gather(*(c.record(0, scored(f"r{i}")) for i in range(8)))
    await settled()
    assert runs.starts == [(0, False)]
    assert len(store.log.load_step(0)) == 8


async def test_rollouts_other_replicas_logged_count_towards_the_threshold(
    store: Store,
) -> None:
    # Three rollouts of step 0 were logged by a replica that stopped before counting them.
    store.log.append_many([(0, scored(f"r{i}")) for i in range(3)])
    runs = Runs()
    c = store.coordinator(runs, {"pipeline.rollouts_per_step": 3}, shared=True)
    await c.record(0, scored("r3"))
    await runs.started(1)
    assert runs.starts == [(0, False)]
    record = store.registry.get(0)
    assert record is not None
    assert (record.status, record.rollout_count) == ("completing", 4)


async def test_a_rollout_does_not_reopen_a_step_another_replica_completes_meanwhile(
    store: Store,
) -> None:
    # Another replica completes step 2 while this one logs a rollout of it.
    logged = store.log.append_many

    def racing(items: Any) -> list[int]:
        store.registry.set(2, status="completing")
        return logged(items)

    store.log.append_many = racing  # type: ignore[method-assign]
    runs = Runs()
    c = store.coordinator(runs, {"pipeline.rollouts_per_step": 1}, shared=True)
    await c.record(2, scored("r"))
    await settled()
    assert store.status(2) == "completing"
    # The threshold is reached here too, but the step is the other replica's to run.
    assert (c.status(2), runs.starts) == ("completing", [])


async def test_rollouts_of_a_step_another_replica_completed_are_late(store: Store) -> None:
    other = store.coordinator(Runs(), shared=True, replica="b")
    await other.record(1, scored("a"))
    await other.complete(1)
    mine = store.coordinator(Runs(), shared=True, replica="a")
    await mine.record(1, scored("b"))
    assert [r.late for r in store.log.load_step(1)] == [False, True]
    assert mine.counts() == {}
    assert mine.status(1) == "completing"


# -- completion ------------------------------------------------------------------------
async def test_complete_starts_a_known_or_the_next_step_only(store: Store) -> None:
    runs = Runs()
    c = store.coordinator(runs)
    error = await refusal_of_complete(c, 1)
    assert (error.reason, error.field) == ("not_next", "step")
    assert "step 1 has no rollouts and is not the next step (0): nothing to complete" in str(error)
    assert await c.complete(0) == "complete"  # the next step, without rollouts
    await runs.started(1)
    record = store.registry.get(0)
    assert record is not None
    assert (record.status, record.rollout_count) == ("completing", 0)
    await c.record(3, scored("r"))
    assert (await refusal_of_complete(c, 5)).reason == "not_next"
    assert (await refusal_of_complete(c, 1)).reason == "not_next"
    assert await c.complete(4) == "complete"
    assert await c.complete(3) == "complete"
    await runs.started(3)
    assert runs.starts == [(0, False), (4, False), (3, False)]
    assert [store.status(s) for s in (0, 3, 4)] == ["completing"] * 3
    await c.record(999, scored("r"))
    assert await c.complete(1000) == "complete"  # numbers past the small-int cache
    await runs.started(4)
    assert runs.starts[-1] == (1000, False)


async def refusal_of_complete(c: StepCoordinator, step: int) -> StepRefusedError:
    with pytest.raises(StepRefusedError) as refused:
        await c.complete(step)
    return refused.value


async def test_complete_without_a_step_starts_every_open_step_once(store: Store) -> None:
    runs = Runs()
    c = store.coordinator(runs)
    for step in (5, 2, 9, 1):
        await c.record(step, scored(f"r{step}"))
    await c.complete(1)
    await runs.started(1)
    runs.finish(1)
    await c.wait(1, timeout=DEADLINE_S)
    await c.complete(9)
    assert await c.complete() == "complete"
    await runs.started(4)
    assert sorted(runs.starts[2:]) == runs.starts[2:] == [(2, False), (5, False)]
    await c.complete()
    await c.complete(5)
    await settled()
    assert len(runs.starts) == 4
    assert c.snapshot() == {1: "done", 2: "completing", 5: "completing", 9: "completing"}


async def test_a_step_another_replica_completed_is_watched_not_started(store: Store) -> None:
    theirs = Runs()
    other = store.coordinator(theirs, shared=True, replica="b")
    await other.record(4, scored("r"))
    await other.complete(4)
    runs = Runs()
    mine = store.coordinator(runs, shared=True, replica="a")
    assert await mine.complete(4) == "noop"  # completing already: nothing changes
    assert mine.status(4) == "completing"
    await theirs.started(1)
    waiter = asyncio.create_task(mine.wait(4, timeout=DEADLINE_S))  # polls the store
    await until(lambda: mine.waiters == 1)
    theirs.finish(4, {**MIXED, "x": scope("already_published")})
    answer = await waiter
    assert (answer.status, answer.scopes) == (
        "updated",
        {**MIXED, "x": scope("already_published")},
    )
    assert await mine.complete(4) == "noop"
    assert await mine.rerun(4) == "done"
    assert runs.starts == []


async def test_a_stale_open_record_never_restarts_a_running_step(store: Store) -> None:
    runs = Runs()
    c = store.coordinator(runs, shared=True)
    await c.record(1, scored("r"))
    await c.complete(1)
    await runs.started(1)
    store.registry.set(1, status="open")  # a replica that lagged behind writes "open"
    await c.complete()
    assert c.status(1) == "completing"
    runs.finish(1)
    assert (await c.wait(1, timeout=DEADLINE_S)).status == "updated"
    assert runs.starts == [(1, False)]


async def test_a_failed_run_is_recorded_and_rerun_as_a_new_attempt(store: Store) -> None:
    finished: list[tuple[str, float]] = []
    runs = Runs()
    c = store.coordinator(runs, on_finished=lambda o, s: finished.append((o, s)))
    await c.record(2, scored("r"))
    await c.complete(2)
    await runs.started(1)
    assert await c.rerun(2) == "running"
    runs.fail(2, ValueError("judge down"))
    answer = await c.wait(2, timeout=DEADLINE_S)
    assert answer == WaitResult(
        status="failed",
        mode="global",
        step=2,
        error="ValueError: judge down",
        scopes=None,
    )
    record = store.registry.get(2)
    assert record is not None
    assert (record.status, record.error) == ("failed", "ValueError: judge down")
    assert [o for o, _ in finished] == ["failed"]
    assert await c.rerun(2) == "started"
    await runs.started(2)
    assert runs.starts == [(2, False), (2, True)]
    record = store.registry.get(2)
    assert record is not None
    assert (record.status, record.error) == ("completing", None)
    # The new attempt is waited for, not the old failure.
    assert (await c.wait(2, timeout=0)).status == "pending"
    runs.fail(2, StepRunFailedError("run step-2 ended Crashed"))
    answer = await c.wait(2, timeout=DEADLINE_S)
    assert (answer.status, answer.error) == ("failed", "run step-2 ended Crashed")
    await c.complete(2)  # a failed step completed again: a new attempt too
    await runs.started(3)
    assert runs.starts[-1] == (2, True)
    runs.finish(2)
    assert (await c.wait(2, timeout=DEADLINE_S)).error is None


async def test_a_step_that_failed_on_another_replica_is_seen_failed_and_rerun(
    store: Store,
) -> None:
    theirs = Runs()
    other = store.coordinator(theirs, shared=True, replica="b")
    await other.record(3, scored("r"))
    await other.record(4, scored("r"))
    await other.complete()
    await theirs.started(2)
    runs = Runs()
    mine = store.coordinator(runs, shared=True, replica="a")
    waiter = asyncio.create_task(mine.wait(3, timeout=DEADLINE_S))
    await until(lambda: mine.waiters == 1)
    theirs.fail(3, RuntimeError("no judge"))
    theirs.fail(4, RuntimeError("no judge"))
    answer = await waiter
    assert (answer.status, answer.error) == ("failed", "RuntimeError: no judge")
    assert await mine.rerun(3) == "started"
    assert await mine.complete(4) == "complete"
    await runs.started(2)
    assert runs.starts == [(3, True), (4, True)]


async def test_rerun_answers_why_not(store: Store) -> None:
    runs = Runs()
    c = store.coordinator(runs)
    assert await c.rerun(1) == "unknown"
    await c.record(1, scored("r"))
    assert await c.rerun(1) == "open"
    await c.complete(1)
    await runs.started(1)
    runs.finish(1)
    await c.wait(1, timeout=DEADLINE_S)
    assert await c.rerun(1) == "done"
    assert runs.starts == [(1, False)]


async def test_a_done_run_records_its_outcome_and_calls_back(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="amaris.steps.coordinator")
    finished: list[tuple[str, float]] = []
    done: list[int] = []
    woken: list[int] = []
    runs = Runs()

    retained = asyncio.Event()

    async def on_done(step: int) -> None:
        await retained.wait()
        done.append(step)

    c = store.coordinator(
        runs,
        on_done=on_done,
        on_finished=lambda outcome, seconds: finished.append((outcome, seconds)),
        after_wake=lambda: woken.append(len(done)),
    )
    await c.record(6, scored("r"))
    started = time.monotonic()
    await c.complete(6)
    await runs.started(1)
    runs.finish(6, MIXED)
    # The wait is answered while the callback (retention) still runs: it is off the step's
    # critical path.
    waiting = asyncio.create_task(c.wait(6, timeout=2 * DEADLINE_S))
    await until(waiting.done)
    answer = waiting.result()
    assert done == []
    retained.set()
    await until(lambda: woken != [])
    elapsed = time.monotonic() - started
    assert answer == WaitResult(
        status="rejected",
        mode="global",
        step=6,
        error=None,
        scopes=MIXED,
    )
    assert done == [6]
    assert woken == [1]
    assert [o for o, _ in finished] == ["done"]
    assert 0 <= finished[0][1] <= elapsed  # the run's own duration, within the test's
    record = store.registry.get(6)
    assert record is not None
    assert (record.status, record.error, record.scopes) == ("done", None, scopes_json(MIXED))
    assert 0 <= record.duration_s <= elapsed + 0.001
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step 6 done")]
    assert len(logged) == 1
    assert 0 <= float(logged[0].split()[-2]) <= elapsed + 0.05  # "step 6 done in 0.0 s"
    assert c.counts() == {}


# -- waits -----------------------------------------------------------------------------
async def test_wait_answers(store: Store) -> None:
    runs = Runs()
    c = store.coordinator(runs, {"memory.rubrics_mode": "per_instance"})
    assert await c.wait() == WaitResult(status="unchanged", mode="per_instance", step=None)
    with pytest.raises(UnknownStepError, match="step 3 is unknown") as unknown:
        await c.wait(3)
    assert unknown.value.step == 3
    await c.record(3, scored("r"))
    assert await c.wait(3, timeout=0) == WaitResult(
        status="pending",
        mode="per_instance",
        step=3,
        step_status="open",
    )
    await c.record(4, scored("r"))
    await c.complete(3)
    await runs.started(1)
    assert (await c.wait(timeout=0)).status == "pending"  # the latest started: step 3
    waiter = asyncio.create_task(c.wait())
    await until(lambda: c.waiters == 1)
    runs.finish(3)
    assert (await waiter).step == 3
    assert c.waiters == 0


async def test_end_waits_answers_blocked_and_later_waits_pending(store: Store) -> None:
    runs = Runs()
    c = store.coordinator(runs)
    await c.record(1, scored("r"))
    await c.record(2, scored("r"))
    await c.complete(1)
    waiter = asyncio.create_task(c.wait(1))
    await until(lambda: c.waiters == 1)
    c.end_waits()
    async with asyncio.timeout(DEADLINE_S):
        assert (await waiter).status == "pending"
        assert (await c.wait(1)).step_status == "completing"
        assert (await c.wait(2)).step_status == "open"  # never waited for before
        await c.close()
    assert store.status(1) == "completing"  # resumable
    assert c.status(1) == "completing"


async def test_wait_without_a_step_follows_the_latest_started_step_in_the_store(
    store: Store,
) -> None:
    theirs = Runs()
    other = store.coordinator(theirs, shared=True, replica="b")
    await other.record(4, scored("r"))
    await other.complete(4)
    fresh = store.coordinator(Runs(), shared=True, replica="c")
    assert (await fresh.wait(timeout=0)).step == 4
    mine = store.coordinator(Runs(), shared=True, replica="a")
    await mine.record(9, scored("r"))
    assert await mine.rerun(9) == "open"
    assert await mine.rerun(4) == "running"
    theirs.finish(4)
    answer = await mine.wait(timeout=DEADLINE_S)
    assert (answer.status, answer.step) == ("updated", 4)


async def test_a_step_known_only_from_the_store_is_waited_for(store: Store) -> None:
    store.registry.set(8, status="done", scopes=scopes_json(PUBLISHED))
    c = store.coordinator(Runs(), shared=True)
    answer = await c.wait(8, timeout=DEADLINE_S)
    assert (answer.status, answer.step, answer.scopes) == ("updated", 8, PUBLISHED)


# -- restart ---------------------------------------------------------------------------
async def test_recover_loads_statuses_and_resumes_completing_steps(store: Store) -> None:
    store.registry.set(1, status="done", scopes=scopes_json(PUBLISHED))
    store.registry.set(2, status="failed", error="boom")
    store.registry.set(3, status="completing", executor="me")
    store.registry.set(4, status="completing", executor="alpha")
    store.registry.set(6, status="completing", executor="zed")
    store.registry.set(5, status="open")
    store.registry.set(7, status="open")
    store.log.append_many([(5, scored("a")), (5, scored("b"))])
    runs = Runs()
    c = store.coordinator(runs, {"pipeline.max_open_steps": 1}, shared=True, replica="me")
    assert await c.recover() == [3, 4, 6]
    await runs.started(3)
    # The step this replica ran gets a new attempt; other replicas' are only watched.
    assert sorted(runs.starts) == [(3, True), (4, False), (6, False)]
    assert c.snapshot() == {
        1: "done",
        2: "failed",
        3: "completing",
        4: "completing",
        5: "open",
        6: "completing",
        7: "open",
    }
    assert c.counts() == {5: 2, 7: 0}
    assert (await refusal(c, 8)).reason == "too_many_open"  # two open, over the bound
    assert (await c.wait(1, timeout=0)).scopes == PUBLISHED
    failed = await c.wait(2, timeout=0)
    assert (failed.status, failed.error) == ("failed", "boom")
    await c.record(5, scored("c"))
    assert c.counts() == {5: 3, 7: 0}
    for step in (3, 4, 6):
        runs.finish(step)
    # The latest started step, not the newer open one.
    assert (await c.wait(timeout=DEADLINE_S)).step == 6


async def test_a_step_resumed_after_a_restart_keeps_its_rollout_count(store: Store) -> None:
    # One replica (no shared store): the count comes from the rollout log, not from what
    # the restarted process counted (nothing).
    store.registry.set(3, status="completing", rollout_count=2)
    store.log.append_many([(3, scored("a")), (3, scored("b"))])
    runs = Runs()
    c = store.coordinator(runs)
    assert await c.recover() == [3]
    await runs.started(1)
    record = store.registry.get(3)
    assert record is not None
    assert (record.status, record.rollout_count) == ("completing", 2)
    runs.finish(3)
    assert (await c.wait(3, timeout=DEADLINE_S)).error is None


async def test_recover_of_an_empty_registry_then_of_one_without_running_steps(store: Store) -> None:
    c = store.coordinator(Runs())
    assert await c.recover() == []
    assert await c.wait() == WaitResult(status="unchanged", mode="global", step=None)
    store.registry.set(0, status="open")
    store.registry.set(2, status="done")
    store.registry.set(3, status="open")
    runs = Runs()
    restarted = store.coordinator(runs)
    assert await restarted.recover() == []
    answer = await restarted.wait(timeout=0)  # the latest started step: 2, not the open 3
    assert (answer.status, answer.step) == ("unchanged", 2)  # no scope recorded
    assert await restarted.complete() == "complete"  # the open steps the registry holds
    await runs.started(2)
    assert runs.starts == [(0, False), (3, False)]


# -- retention -------------------------------------------------------------------------
def retained(tmp_path: Path, rollouts: int | None, analyses: int | None) -> Any:
    # A file, not overrides: an override of None means "not set" (the command line's).
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "memory": {
                    "path": str(tmp_path),
                    "rollout_retention_steps": rollouts,
                    "analysis_retention_steps": analyses,
                }
            }
        )
    )
    configured = load_settings(config)
    qdrant = QdrantClient(":memory:")
    log = SqliteRolloutLog(":memory:", "t")
    memory = MemoryStore(qdrant, "t", HashingEmbedder(16))
    for step in range(4):
        ids = [(f"s{step}-a", "a"), (f"s{step}-b", "b")]
        log.append_many([(step, scored(rid, scope)) for rid, scope in ids])
        for rid, scope in ids:
            memory.put_analyses(scope, step, [(rid, {"step": step})])

    def analysed(step: int) -> list[str]:
        found = {
            **memory.get_analyses("a", step, [f"s{step}-a", f"s{step}-b"]),
            **memory.get_analyses("b", step, [f"s{step}-a", f"s{step}-b"]),
        }
        return sorted(found)

    return configured, log, memory, analysed


def test_retention_archives_old_rollouts_and_drops_old_analyses(tmp_path: Path) -> None:
    configured, log, memory, analysed = retained(tmp_path, rollouts=1, analyses=2)
    enforce_retention(configured, log, memory, 0)
    assert [log.count(s) for s in range(4)] == [2, 2, 2, 2]
    assert not (tmp_path / "rollouts").exists()
    enforce_retention(configured, log, memory, 1)  # step 0's rollouts go, analyses stay
    assert [log.count(s) for s in range(4)] == [0, 2, 2, 2]
    archive = tmp_path / "rollouts" / "step-000000.jsonl"
    lines = archive.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["rollout"]["id"] for line in lines] == ["s0-a", "s0-b"]
    assert analysed(0) == ["s0-a", "s0-b"]
    enforce_retention(configured, log, memory, 2)  # step 0's analyses go, read from the archive
    assert analysed(0) == []
    assert analysed(1) == ["s1-a", "s1-b"]
    assert [log.count(s) for s in range(4)] == [0, 0, 2, 2]
    enforce_retention(configured, log, memory, 3)
    assert (analysed(1), analysed(2)) == ([], ["s2-a", "s2-b"])
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == [
        "step-000000.jsonl",
        "step-000001.jsonl",
        "step-000002.jsonl",
    ]
    enforce_retention(configured, log, memory, 4)  # step 3's rollouts: none left to archive
    enforce_retention(configured, log, memory, 5)
    assert not (tmp_path / "rollouts" / "step-000004.jsonl").exists()
    assert analysed(3) == []


def test_retention_off_keeps_everything(tmp_path: Path) -> None:
    configured, log, memory, analysed = retained(tmp_path, rollouts=None, analyses=None)
    enforce_retention(configured, log, memory, 3)
    assert [log.count(s) for s in range(4)] == [2, 2, 2, 2]
    assert [analysed(s) for s in range(4)] == [[f"s{s}-a", f"s{s}-b"] for s in range(4)]
    assert not (tmp_path / "rollouts").exists()
    assert (
        configured.memory.rollout_retention_steps,
        configured.memory.analysis_retention_steps,
    ) == (None, None)


def test_analyses_of_the_step_at_the_retention_go_with_rollouts_kept(tmp_path: Path) -> None:
    configured, log, memory, analysed = retained(tmp_path, rollouts=None, analyses=1)
    enforce_retention(configured, log, memory, 0)
    assert analysed(0) == ["s0-a", "s0-b"]
    enforce_retention(configured, log, memory, 1)
    assert (analysed(0), analysed(1)) == ([], ["s1-a", "s1-b"])
    assert log.count(0) == 2
