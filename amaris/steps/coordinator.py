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
import concurrent.futures
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from amaris.logs import loggable
from amaris.memory.batched_append import BatchedAppender
from amaris.memory.rollout_log import RolloutLog, StepRegistry, step_records
from amaris.memory.storage_health import (
    STORAGE_ERRORS,
    StorageHealth,
    StorageUnavailableError,
)
from amaris.settings import Settings
from amaris.steps.store import InProcess, StepStore

log = logging.getLogger("amaris.steps.coordinator")

RunStep = Callable[[int, bool], concurrent.futures.Future[dict[str, Any]]]
"""Runs a step's flow (``True``: as a new attempt after a failure); the outcome."""
_STATUS_TTL = 1.0
"""Seconds a replica trusts its view of an open step's status."""
_WAIT_POLL = 0.5

Refusal = Literal["out_of_range", "too_many_open", "not_next"]


class StepRefusedError(ValueError):
    """A step amaris does not accept; nothing was judged, logged or opened.

    ``reason``: ``out_of_range`` (past ``pipeline.max_step``, or more than
    ``pipeline.max_steps_ahead`` past the newest step), ``too_many_open``
    (``pipeline.max_open_steps`` are open), ``not_next`` (``/complete`` of a step without
    rollouts that is not the next step). ``field``: the request field that held the step.
    """

    def __init__(self, reason: Refusal, message: str, field: str = "metadata.current_step") -> None:
        super().__init__(message)
        self.reason: Refusal = reason
        self.field = field


class StepRunFailedError(RuntimeError):
    """A step's run ended other than Completed; the message says how (its run's state, as
    recorded). A run step raises it when the failure is not an exception of this process."""


class UnknownStepError(LookupError):
    """No rollout was logged for the step and it was never completed."""

    def __init__(self, step: int) -> None:
        super().__init__(
            f"step {step} is unknown: no rollout was logged for it and it was never completed"
        )
        self.step = step


class StepCoordinator:
    """Counts rollouts per step, starts step flows and wakes waiters."""

    def __init__(
        self,
        settings: Settings,
        rollouts: RolloutLog,
        steps: StepRegistry,
        run_step: RunStep,
        on_done: Callable[[int], Coroutine[Any, Any, None]] | None = None,
        on_finished: Callable[[str, float], None] | None = None,
        store: StepStore | None = None,
        replica: str = "",
        after_wake: Callable[[], None] | None = None,
        storage: StorageHealth | None = None,
    ) -> None:
        """``on_finished`` (metrics) gets ``done`` or ``failed`` and the pipeline's seconds.

        ``after_wake``: called (on the loop) once a step's waiters are woken.
        ``store``: what other processes did to steps (default: none do, :class:`InProcess`).
        ``replica``: this process's name in the registry's ``executor`` field.
        ``storage``: where failed durable writes are recorded (default: a new one).
        """
        self.storage = storage or StorageHealth()
        self._store: StepStore = store or InProcess()
        self._after_wake = after_wake
        self._replica = replica
        self._checked: dict[int, float] = {}
        self._supervised: set[int] = set()
        """Steps whose run this process awaits (their event is set when it ends)."""
        self._settings = settings
        self._rollouts = rollouts
        self._steps = steps
        self._run_step = run_step
        self._on_done = on_done
        self._on_finished = on_finished
        self._status: dict[int, str] = {}
        self._counts: dict[int, int] = {}
        self._events: dict[int, asyncio.Event] = {}
        self._outcomes: dict[int, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_started: int | None = None
        self._opening: dict[int, int] = {}
        """Rollouts admitted to a step not yet known, per step, until they are logged."""
        self._steps_synced = 0.0
        self._waiting = 0
        self._closing = False
        self._lock = asyncio.Lock()
        self._appender = BatchedAppender(rollouts)

    # -- start-up ------------------------------------------------------------------
    async def recover(self) -> list[int]:
        """Load step status; re-run steps that were completing when the process stopped.

        Returns:
            The steps resumed.
        """
        entries = await asyncio.to_thread(self._steps.list, None, 10_000)
        resumed = []
        for entry in entries:
            step = int(entry["step"])
            status = str(entry["status"])
            self._status[step] = status
            if status == "open":
                self._counts[step] = await asyncio.to_thread(self._rollouts.count, step)
            if status in {"done", "failed"}:
                self._event(step).set()
                self._outcomes[step] = {"error": entry.get("error"), "scopes": entry.get("scopes")}
            if status == "completing":
                resumed.append(step)
        by_step = {int(e["step"]): e for e in entries}
        for step in resumed:
            # A step another replica started is only watched; one this replica started (the
            # only replica: it started them all) gets a new attempt.
            mine = by_step[step].get("executor", "") == self._replica
            log.warning("resuming step %s, interrupted while completing", step)
            await self._start(step, resume=True, new_attempt=mine)
        started = [s for s, st in self._status.items() if st != "open"]
        self._last_started = max(started) if started else None
        return resumed

    # -- hot path -----------------------------------------------------------------
    @asynccontextmanager
    async def admission(self, step: int) -> AsyncIterator[None]:
        """Refuse a rollout's step before anything is judged or logged (see :meth:`check`);
        while the block runs, an admitted new step counts as open."""
        await self.check(step)
        new = step not in self._status
        if new:  # no await since the check: the count it used is still true
            self._opening[step] = self._opening.get(step, 0) + 1
        try:
            yield
        finally:
            if new:
                left = self._opening.pop(step) - 1
                if left:
                    self._opening[step] = left

    async def check(self, step: int) -> None:
        """Raise :class:`StepRefusedError` if a rollout may not go to ``step``.

        A step is refused past ``pipeline.max_step``; a step amaris does not know yet also
        when it is more than ``pipeline.max_steps_ahead`` past the newest step it knows
        (any step when it knows none), or when ``pipeline.max_open_steps`` are open.
        A step it does not know is first looked up in the store (at most every second).
        """
        if (
            step not in self._status
            and step <= self._settings.pipeline.max_step
            and time.monotonic() - self._steps_synced >= _STATUS_TTL
        ):
            # Other replicas open steps too: judge a step new to this replica on the
            # registry's view (re-read at most every second: a flood of new or refused
            # steps is no flood of reads).
            self._steps_synced = time.monotonic()
            await self._sync_from_store()
        refusal = self._refusal(step)
        if refusal is not None:
            raise refusal

    def _refusal(self, step: int) -> StepRefusedError | None:
        pipeline = self._settings.pipeline
        if step > pipeline.max_step:
            return StepRefusedError(
                "out_of_range", f"is over pipeline.max_step ({pipeline.max_step})"
            )
        if step in self._status or step in self._opening:
            return None
        newest = max([*self._status, *self._opening], default=None)
        if newest is not None and step > newest + pipeline.max_steps_ahead:
            return StepRefusedError(
                "out_of_range",
                (
                    f"step {step} is more than pipeline.max_steps_ahead "
                    f"({pipeline.max_steps_ahead}) past the newest step ({newest})"
                ),
            )
        opened = {s for s, st in self._status.items() if st == "open"} | self._opening.keys()
        if len(opened) >= pipeline.max_open_steps:
            return StepRefusedError(
                "too_many_open",
                (
                    f"step {step} would open one more step; {len(opened)} are open "
                    f"(pipeline.max_open_steps): complete steps first (POST /complete)"
                ),
            )
        return None

    async def record(self, step: int, record: dict[str, Any]) -> None:
        """Append a scored rollout to the log (durably, before the response is sent)."""
        status = await self._open_status(step)
        record = {**record, "step": step, "time": time.time(), "late": status not in (None, "open")}
        try:
            await self._appender.append(step, record)
        except STORAGE_ERRORS as exc:
            raise self.storage.failed("rollout log", exc) from exc
        self.storage.ok("rollout log")
        if status is None:
            self._status[step] = "open"
            # Never turn another replica's ``completing`` back into ``open``.
            if await self._store.get(step) is None:
                try:
                    await self._register(step, status="open")
                except StorageUnavailableError:
                    # Unknown again, so the step's next rollout registers it.
                    if self._status.get(step) == "open":
                        del self._status[step]
                    raise
        if record["late"]:
            log.warning(
                "rollout %s arrived after step %s was completed; logged, not analysed",
                loggable(record["rollout"]["id"]),
                step,
            )
            return
        self._counts[step] = self._counts.get(step, 0) + 1
        target = self._settings.pipeline.rollouts_per_step
        if target is None:
            return
        if await self._store.count(step, self._counts[step]) >= target:
            await self._start(step)

    async def _open_status(self, step: int) -> str | None:
        """The step's status; an open step is looked up in the store at most every second,
        so a step another replica completed is seen (its late rollouts flagged)."""
        status = self._status.get(step)
        if status not in (None, "open"):
            return status
        now = time.monotonic()
        if now - self._checked.get(step, 0.0) < _STATUS_TTL:
            return status
        self._checked[step] = now
        record = await self._store.get(step)
        if record is not None:
            self._status[step] = status = str(record["status"])
        return status

    # -- control ------------------------------------------------------------------
    async def complete(self, step: int | None = None) -> str:
        """``POST /complete``: ``noop`` when steps complete by themselves, else start the
        flow of ``step`` (default: every open step) and answer ``complete``.

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
                following = max(self._status, default=-1) + 1
                if step != following and step not in self._status:
                    raise StepRefusedError(
                        "not_next",
                        (
                            f"step {step} has no rollouts and is not the next step "
                            f"({following}): nothing to complete"
                        ),
                        field="step",
                    )
            if status in (None, "open", "failed"):
                await self._start(step, new_attempt=status == "failed")
            return "complete"
        await self._sync_from_store()
        for open_step in sorted(s for s, st in self._status.items() if st == "open"):
            await self._start(open_step)
        return "complete"

    async def _stored_status(self, step: int) -> str | None:
        """The step's status, as the store has it (one record) unless this process
        supervises the step's run itself."""
        if step not in self._supervised:
            record = await self._store.get(step)
            if record is not None:
                self._status[step] = str(record["status"])
                if record["status"] != "open":
                    self._last_started = max(step, self._last_started or step)
        return self._status.get(step)

    async def _sync_from_store(self) -> None:
        """Adopt the statuses other replicas wrote (steps they opened or ran)."""
        for entry in await self._store.entries():
            step, status = int(entry["step"]), str(entry["status"])
            if self._status.get(step) != "completing" or status in ("done", "failed"):
                self._status[step] = status
            if status != "open":
                self._last_started = max(step, self._last_started or step)

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

    def snapshot(self) -> dict[int, str]:
        """Status of every step this process knows."""
        return dict(self._status)

    async def wait(self, step: int | None = None, timeout: float | None = None) -> dict[str, Any]:
        """Block until ``step`` (default: the latest started step) is done or failed.

        Returns ``{"status": "updated" | "failed" | "pending", "step", ...}``;
        ``pending`` when ``timeout`` seconds passed first, or the process is stopping
        (:meth:`end_waits`).

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
            return {"status": "updated", "mode": mode, "step": None}
        event = self._event(target)
        if self._status.get(target) in (None, "open") and step is None:
            return {"status": "updated", "mode": mode, "step": target}
        self._waiting += 1
        try:
            if not self._closing:
                async with asyncio.timeout(timeout):
                    if target in self._supervised:
                        await event.wait()
                    else:
                        await self._poll_final(target, event)
        except TimeoutError:
            pass
        finally:
            self._waiting -= 1
        if self._status.get(target) not in ("done", "failed"):
            return {
                "status": "pending",
                "mode": mode,
                "step": target,
                "step_status": self._status.get(target, "unknown"),
            }
        outcome = self._outcomes.get(target, {})
        status = "failed" if self._status.get(target) == "failed" else "updated"
        return {
            "status": status,
            "mode": mode,
            "step": target,
            "error": outcome.get("error"),
            "scopes": outcome.get("scopes"),
        }

    @property
    def waiters(self) -> int:
        """Calls of :meth:`wait` blocked right now."""
        return self._waiting

    def end_waits(self) -> None:
        """The process is stopping: every blocked :meth:`wait` answers ``pending`` now,
        and later ones at once (so a server's shutdown is not held by long polls)."""
        self._closing = True
        for event in self._events.values():
            event.set()

    async def _poll_final(self, step: int, event: asyncio.Event) -> None:
        """Until the store says ``done`` or ``failed`` (whichever replica ran the step) or
        this process's own supervision ends."""
        while not event.is_set():
            record = await self._store.get(step) or {}
            if record.get("status") in ("done", "failed"):
                self._status[step] = str(record["status"])
                self._outcomes[step] = {
                    "error": record.get("error"),
                    "scopes": record.get("scopes"),
                }
                return
            try:
                async with asyncio.timeout(_WAIT_POLL):
                    await event.wait()
            except TimeoutError:
                pass

    def status(self, step: int) -> str | None:
        """The step's status as this process knows it."""
        return self._status.get(step)

    def counts(self) -> dict[int, int]:
        """Rollouts counted per open step."""
        return dict(self._counts)

    # -- internals -----------------------------------------------------------------
    def _event(self, step: int) -> asyncio.Event:
        if step not in self._events:
            self._events[step] = asyncio.Event()
        return self._events[step]

    async def _start(self, step: int, resume: bool = False, new_attempt: bool = False) -> None:
        async with self._lock:
            if not resume and self._status.get(step) == "completing":
                return
            if not resume and not new_attempt:
                record = await self._store.get(step) or {}
                if record.get("status") in ("completing", "done"):
                    # Another replica completed it: watch it, do not start it again.
                    self._status[step] = str(record["status"])
                    return
            counted = self._counts.get(step)
            if counted is None and resume:
                # A step resumed after a restart: this process counted none of its
                # rollouts, the log holds them.
                counted = await asyncio.to_thread(self._rollouts.count, step)
            count = await self._store.count(step, counted or 0)
            # The registry first: if the machine refuses the write, the step stays as it
            # was here too (retryable), not ``completing`` with no run until a restart.
            await self._register(step, status="completing", rollout_count=count, error=None)
            self._status[step] = "completing"
            self._event(step).clear()
            self._last_started = max(step, self._last_started or step)
            self._supervised.add(step)
        task = asyncio.create_task(self._supervise(step, new_attempt), name=f"step-{step}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _supervise(self, step: int, new_attempt: bool = False) -> None:
        started = time.monotonic()
        try:
            outcome = await asyncio.wrap_future(self._run_step(step, new_attempt))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = (
                str(exc) if isinstance(exc, StepRunFailedError) else f"{type(exc).__name__}: {exc}"
            )
            log.error("step %s failed: %s", step, error)
            # Every replica that supervised the run records the same outcome.
            await self._outcome(step, "failed", {"error": error}, started, error=error)
        else:
            log.info("step %s done in %.1f s", step, time.monotonic() - started)
            recorded = await self._outcome(
                step,
                "done",
                outcome,
                started,
                error=None,
                duration_s=round(time.monotonic() - started, 3),
                scopes=outcome.get("scopes"),
            )
            if recorded and self._on_done is not None:
                await self._on_done(step)
        finally:
            self._counts.pop(step, None)
            self._supervised.discard(step)
            self._event(step).set()
            if self._after_wake is not None:
                # After waiters are woken: not on the step's critical path.
                asyncio.get_running_loop().call_soon(self._after_wake)

    async def _register(self, step: int, **fields: Any) -> None:
        """Write ``fields`` to the step's registry record; a write the machine refuses
        raises :class:`~amaris.memory.storage_health.StorageUnavailableError`."""
        try:
            await asyncio.to_thread(self._steps.set, step, **fields)
        except STORAGE_ERRORS as exc:
            raise self.storage.failed("step registry", exc) from exc
        self.storage.ok("step registry")

    async def _outcome(
        self, step: int, status: str, outcome: dict[str, Any], started: float, **fields: Any
    ) -> bool:
        """Record the end of the step's run, in the registry first. If the registry refuses
        the write, the step is ``failed`` here with that cause (a new attempt is one
        ``/complete`` away; the registry still says ``completing``, so a restart resumes it).

        Returns:
            Whether the outcome was recorded as ``status``.
        """
        try:
            await self._register(step, status=status, **fields)
        except StorageUnavailableError as exc:
            error = f"the step's {status} outcome could not be recorded: {exc}"
            log.error("step %s: %s", step, error)
            status, outcome = "failed", {"error": error}
            recorded = False
        else:
            recorded = True
        self._status[step] = status
        self._outcomes[step] = outcome
        self._finished(status, started)
        return recorded

    def _finished(self, outcome: str, started: float) -> None:
        if self._on_finished is not None:
            self._on_finished(outcome, time.monotonic() - started)

    async def close(self) -> None:
        """End waits and stop supervising (flows keep their Prefect state; steps stay
        resumable)."""
        self.end_waits()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def enforce_retention(
    settings: Settings, rollouts: RolloutLog, memory: Any, finished_step: int
) -> None:
    """Blocking: archive and drop rollouts, and drop full analyses, of steps past their retention.

    Rollouts of step ``s - memory.rollout_retention_steps`` go to
    ``<memory.path>/rollouts/step-NNNNNN.jsonl`` and leave Qdrant; full analyses of step
    ``s - memory.analysis_retention_steps`` leave Qdrant (summaries, updates and flagged
    findings stay searchable for the whole run).
    """
    folder = Path(settings.memory.path) / "rollouts"
    keep = settings.memory.rollout_retention_steps
    if keep is not None and finished_step - keep >= 0:
        old = finished_step - keep
        if rollouts.count(old):
            rollouts.archive_step(old, folder)
            rollouts.drop_step(old)
    analysis_keep = settings.memory.analysis_retention_steps
    if analysis_keep is None or finished_step - analysis_keep < 0:
        return
    old = finished_step - analysis_keep
    records = step_records(rollouts, settings.memory.path, old)
    by_scope: dict[str, list[str]] = {}
    for record in records:
        by_scope.setdefault(record["scope"], []).append(record["rollout"]["id"])
    for scope, ids in by_scope.items():
        memory.drop_analyses(scope, old, ids)
