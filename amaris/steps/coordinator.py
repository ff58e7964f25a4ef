"""Step lifecycle: log rollouts, complete steps, run their flows, let trainers wait.

A step is ``open`` while rollouts arrive, ``completing`` while its flow runs, then
``done`` or ``failed``. Status lives in Qdrant (``StepRegistry``) so a restart
resumes steps that were completing; the asyncio events here only wake waiters of
this process. A status changes here only once its registry write succeeded: a write the
machine refuses (full disk, locked database) raises
:class:`~amaris.memory.storage_health.StorageUnavailableError` and leaves the step as it
was (``open`` stays ``open``: ``/complete`` may be retried), recorded in
:attr:`StepCoordinator.storage`. What other processes did to steps comes from a
:class:`StepStore` (``amaris/steps/store.py``): nothing with one replica, the shared store
with several (``pipeline.executor: deployment``), so counts and statuses are never this
process's memory alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from amaris.logs import loggable
from amaris.memory.models import StepRecord, StepStatus
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import RolloutLog, StepRegistry
from amaris.memory.storage_health import StorageHealth, StorageUnavailableError
from amaris.settings import Settings
from amaris.steps.durable import DurableWrites
from amaris.steps.errors import StepRefusedError, StepRunFailedError, UnknownStepError
from amaris.steps.launcher import StepLauncher
from amaris.steps.outcomes import StepOutcome, WaitResult, scopes_json
from amaris.steps.state import StepState, StepStates
from amaris.steps.store import InProcess, StepStore

__all__ = [
    "StepCoordinator",
    "StepRefusedError",
    "StepRunFailedError",
    "StepState",
    "UnknownStepError",
]

log = logging.getLogger("amaris.steps.coordinator")

_STATUS_TTL = 1.0
"""Seconds a replica trusts its view of an open step's status."""
_WAIT_POLL = 0.5


class StepCoordinator:
    """Counts rollouts per step, starts step flows and wakes waiters."""

    def __init__(
        self,
        settings: Settings,
        rollouts: RolloutLog,
        steps: StepRegistry,
        launcher: StepLauncher,
        on_done: Callable[[int], Coroutine[Any, Any, None]] | None = None,
        on_finished: Callable[[str, float], None] | None = None,
        store: StepStore | None = None,
        replica: str = "",
        after_wake: Callable[[], None] | None = None,
        storage: StorageHealth | None = None,
    ) -> None:
        """``on_finished`` (metrics) gets ``done`` or ``failed`` and the pipeline's seconds.

        ``launcher``: starts each step's run, here or elsewhere (:class:`StepLauncher`).
        ``on_done``: awaited once a done step's waiters are woken (retention).
        ``after_wake``: called (on the loop) once a step's waiters are woken, after ``on_done``.
        ``store``: what other processes did to steps (default: none do, :class:`InProcess`).
        ``replica``: this process's name in the registry's ``executor`` field.
        ``storage``: where failed durable writes are recorded (default: a new one).
        """
        self._durable = DurableWrites(rollouts, steps, storage or StorageHealth())
        self.storage = self._durable.storage
        self._store: StepStore = store or InProcess()
        self._after_wake = after_wake
        self._replica = replica
        self._settings = settings
        self._rollouts = rollouts
        self._steps = steps
        self._launcher = launcher
        self._on_done = on_done
        self._on_finished = on_finished
        self._states = StepStates()
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_started: int | None = None
        self._steps_synced = 0.0
        self._waiting = 0
        self._closing = False
        self._lock = asyncio.Lock()
        self.late = 0
        """Rollouts logged after their step was completed (not analysed)."""

    def _set_status(self, step: int, status: StepStatus) -> None:
        self._states.of(step).status = status
        if status != "open":
            self._last_started = max(step, self._last_started or step)

    # -- start-up ------------------------------------------------------------------
    async def recover(self) -> list[int]:
        """Load step status; re-run steps that were completing when the process stopped.

        Returns:
            The steps resumed.
        """
        entries = await asyncio.to_thread(self._steps.list, None, 10_000)
        resumed: list[StepRecord] = []
        for entry in entries:
            state = self._states.of(entry.step)
            state.status = entry.status
            if entry.status == "open":
                state.counted = await asyncio.to_thread(self._rollouts.count, entry.step)
            if entry.status in {"done", "failed"}:
                state.event.set()
                state.outcome = StepOutcome.of(entry)
            if entry.status == "completing":
                resumed.append(entry)
        for entry in resumed:
            # A step another replica started is only watched; one this replica started (the
            # only replica: it started them all) gets a new attempt.
            mine = (entry.executor or "") == self._replica
            log.warning("resuming step %s, interrupted while completing", entry.step)
            await self._start(entry.step, resume=True, new_attempt=mine)
        started = [s for s, st in self.snapshot().items() if st != "open"]
        self._last_started = max(started) if started else None
        return [entry.step for entry in resumed]

    # -- hot path -----------------------------------------------------------------
    @asynccontextmanager
    async def admission(self, step: int) -> AsyncIterator[None]:
        """Refuse a rollout's step before anything is judged or logged (see :meth:`check`);
        while the block runs, an admitted new step counts as open."""
        await self.check(step)
        state = self._states.of(step)
        new = state.status is None
        if new:  # no await since the check: the count it used is still true
            state.opening += 1
        try:
            yield
        finally:
            if new:
                state.opening -= 1
                self._states.forget_if_unknown(step)

    async def check(self, step: int) -> None:
        """Raise :class:`StepRefusedError` if a rollout may not go to ``step``.

        A step is refused past ``pipeline.max_step``; a step amaris does not know yet also
        when it is more than ``pipeline.max_steps_ahead`` past the newest step it knows
        (any step when it knows none), or when ``pipeline.max_open_steps`` are open.
        A step it does not know is first looked up in the store (at most every second).
        """
        if self.status(step) is None and step <= self._settings.pipeline.max_step:
            await self._sync_now_and_then()
        refusal = self._states.refusal(self._settings.pipeline, step)
        if refusal is not None:
            raise refusal

    async def _sync_now_and_then(self) -> None:
        # Other replicas open steps too: read the registry's view, at most every second (a
        # flood of new or refused steps is no flood of reads).
        if time.monotonic() - self._steps_synced >= _STATUS_TTL:
            self._steps_synced = time.monotonic()
            await self._sync_from_store()

    async def open_step(self) -> int:
        """The step a rollout without ``metadata.current_step`` goes to: the oldest open
        step, else the one after the newest step amaris knows (0 when it knows none)."""
        await self._sync_now_and_then()
        return self._states.open_step()

    async def record(self, step: int, record: RolloutRecord) -> bool:
        """Append a scored rollout to the log (durably, before the response is sent);
        whether it is late: its step was completed already, so it is logged, not analysed
        (counted in ``late``)."""
        status = await self._open_status(step)
        late = status not in (None, "open")
        record = record.model_copy(update={"step": step, "time": time.time(), "late": late})
        await self._durable.append(step, record)
        state = self._states.of(step)
        if status is None:
            state.status = "open"
            # Never turn another replica's ``completing`` back into ``open``.
            if await self._store.get(step) is None:
                try:
                    await self._durable.register(step, status="open")
                except StorageUnavailableError:
                    # Unknown again, so the step's next rollout registers it.
                    if state.status == "open":
                        state.status = None
                        self._states.forget_if_unknown(step)
                    raise
        if late:
            self.late += 1
            log.warning(
                "rollout %s arrived after step %s was completed; logged, not analysed",
                loggable(record.rollout.id),
                step,
            )
            return True
        state.counted = (state.counted or 0) + 1
        target = self._settings.pipeline.rollouts_per_step
        if target is not None and await self._store.count(step, state.counted) >= target:
            await self._start(step)
        return False

    async def _open_status(self, step: int) -> StepStatus | None:
        """The step's status; an open step is looked up in the store at most every second,
        so a step another replica completed is seen (its late rollouts flagged)."""
        status = self.status(step)
        if status not in (None, "open"):
            return status
        now = time.monotonic()
        state = self._states.of(step)
        if now - state.checked < _STATUS_TTL:
            return status
        state.checked = now
        record = await self._store.get(step)
        if record is not None:
            state.status = status = record.status
        return status

    # -- control ------------------------------------------------------------------
    async def complete(self, step: int | None = None) -> str:
        """``POST /complete``: ``noop`` when steps complete by themselves or ``step`` was
        completed already (done, or completing now), else start the flow of ``step``
        (default: every open step) and answer ``complete``.

        Raises:
            StepRefusedError: ``step`` is over ``pipeline.max_step``; or amaris does not
                know it (no rollout logged, never completed) and it is not the next step,
                the one after the newest step amaris knows (0 when it knows none).
        """
        max_step = self._settings.pipeline.max_step
        if step is not None and step > max_step:
            raise StepRefusedError(
                "out_of_range", f"is over pipeline.max_step ({max_step})", field="step"
            )
        if self._settings.pipeline.rollouts_per_step is not None:
            return "noop"
        if step is not None:
            status = await self._stored_status(step)
            if status is None:
                await self._sync_from_store()
                if (refused := self._states.not_next(step)) is not None:
                    raise refused
            if status not in (None, "open", "failed"):
                return "noop"  # completed already: nothing changes
            await self._start(step, new_attempt=status == "failed")
            return "complete"
        await self._sync_from_store()
        for open_step in sorted(s for s, st in self.snapshot().items() if st == "open"):
            await self._start(open_step)
        return "complete"

    async def _stored_status(self, step: int) -> StepStatus | None:
        """The step's status, as the store has it (one record) unless this process
        supervises the step's run itself."""
        state = self._states.get(step)
        if state is None or not state.supervised:
            record = await self._store.get(step)
            if record is not None:
                self._set_status(step, record.status)
        return self.status(step)

    async def _sync_from_store(self) -> None:
        """Adopt the statuses other replicas wrote (steps they opened or ran)."""
        for entry in await self._store.entries():
            state = self._states.of(entry.step)
            if state.status != "completing" or entry.status in ("done", "failed"):
                state.status = entry.status
            if entry.status != "open":
                self._last_started = max(entry.step, self._last_started or entry.step)

    async def rerun(self, step: int) -> str:
        """Re-run a failed step (repair): ``started``, or why not (``unknown``, ``running``,
        ``done``, ``open``)."""
        status = await self._stored_status(step)
        if status is None:
            return "unknown"
        if status == "failed":
            await self._start(step, new_attempt=True)
            return "started"
        return "running" if status == "completing" else status

    def snapshot(self) -> dict[int, StepStatus]:
        """Status of every step this process knows."""
        return self._states.known()

    async def wait(self, step: int | None = None, timeout: float | None = None) -> WaitResult:
        """Block until ``step`` (default: the latest started step) is done or failed.

        Answers ``failed``, or what the step did to the rubric (``updated``, ``unchanged``,
        ``rejected``: :func:`~amaris.steps.outcomes.rubric_status`), with the step's outcome;
        ``unchanged`` when there is no started step to wait for; ``pending`` when ``timeout``
        seconds passed first, or the process is stopping (:meth:`end_waits`).

        Raises:
            UnknownStepError: ``step`` is given and amaris does not know it.
        """
        if step is None:
            await self._sync_from_store()
        elif await self._stored_status(step) is None:
            raise UnknownStepError(step)
        target = step if step is not None else self._last_started
        mode = self._settings.memory.rubrics_mode
        if target is None:
            return WaitResult(status="unchanged", mode=mode, step=None)
        state = self._states.of(target)
        if state.status in (None, "open") and step is None:
            return WaitResult(status="unchanged", mode=mode, step=target)
        self._waiting += 1
        try:
            if not self._closing:
                async with asyncio.timeout(timeout):
                    if state.supervised:
                        await state.event.wait()
                    else:
                        await self._poll_final(target, state)
        except TimeoutError:
            pass
        finally:
            self._waiting -= 1
        return state.answer(mode, target)

    @property
    def waiters(self) -> int:
        """Calls of :meth:`wait` blocked right now."""
        return self._waiting

    def end_waits(self) -> None:
        """The process is stopping: every blocked :meth:`wait` answers ``pending`` now,
        and later ones at once (so a server's shutdown is not held by long polls)."""
        self._closing = True
        for state in self._states.values():
            state.event.set()

    async def _poll_final(self, step: int, state: StepState) -> None:
        """Until the store says ``done`` or ``failed`` (whichever replica ran the step) or
        this process's own supervision ends."""
        while not state.event.is_set():
            record = await self._store.get(step)
            if record is not None and record.status in ("done", "failed"):
                state.status = record.status
                state.outcome = StepOutcome.of(record)
                return
            try:
                async with asyncio.timeout(_WAIT_POLL):
                    await state.event.wait()
            except TimeoutError:
                pass

    def status(self, step: int) -> StepStatus | None:
        """The step's status as this process knows it."""
        return self._states.status(step)

    def counts(self) -> dict[int, int]:
        """Rollouts counted per open step."""
        return self._states.counted()

    # -- internals -----------------------------------------------------------------
    async def _start(self, step: int, resume: bool = False, new_attempt: bool = False) -> None:
        async with self._lock:
            state = self._states.of(step)
            if not resume and state.status == "completing":
                return
            if not resume and not new_attempt:
                record = await self._store.get(step)
                if record is not None and record.status in ("completing", "done"):
                    # Another replica completed it: watch it, do not start it again.
                    state.status = record.status
                    return
            counted = state.counted
            if counted is None and resume:
                # A step resumed after a restart: this process counted none of its
                # rollouts, the log holds them.
                counted = await asyncio.to_thread(self._rollouts.count, step)
            count = await self._store.count(step, counted or 0)
            # The registry first: if the machine refuses the write, the step stays as it
            # was here too (retryable), not ``completing`` with no run until a restart.
            await self._durable.register(step, status="completing", rollout_count=count, error=None)
            self._set_status(step, "completing")
            state.event.clear()
            state.supervised = True
        task = asyncio.create_task(self._supervise(step, new_attempt), name=f"step-{step}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _supervise(self, step: int, new_attempt: bool = False) -> None:
        started = time.monotonic()
        recorded = False
        try:
            outcome = await asyncio.wrap_future(self._launcher.run(step, new_attempt))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = (
                str(exc) if isinstance(exc, StepRunFailedError) else f"{type(exc).__name__}: {exc}"
            )
            log.error("step %s failed: %s", step, error)
            # Every replica that supervised the run records the same outcome.
            await self._outcome(step, "failed", StepOutcome(error=error), started, error=error)
        else:
            log.info("step %s done in %.1f s", step, time.monotonic() - started)
            scopes = outcome.scopes
            recorded = await self._outcome(
                step,
                "done",
                StepOutcome(scopes=scopes),
                started,
                error=None,
                duration_s=round(time.monotonic() - started, 3),
                scopes=scopes_json(scopes),
            )
        finally:
            state = self._states.of(step)
            state.counted = None
            state.supervised = False
            state.event.set()
        # After the waiters are woken: neither is on the step's critical path.
        if recorded and self._on_done is not None:
            await self._on_done(step)
        if self._after_wake is not None:
            asyncio.get_running_loop().call_soon(self._after_wake)

    async def _outcome(
        self, step: int, status: StepStatus, outcome: StepOutcome, started: float, **fields: object
    ) -> bool:
        """Record the end of the step's run (see :meth:`DurableWrites.end`); whether it was
        recorded as ``status``."""
        state = self._states.of(step)
        state.status, state.outcome = await self._durable.end(step, status, outcome, **fields)
        if self._on_finished is not None:
            self._on_finished(state.status, time.monotonic() - started)
        return state.status == status and state.outcome is outcome

    async def close(self) -> None:
        """End waits and stop supervising (flows keep their Prefect state; steps stay
        resumable)."""
        self.end_waits()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
