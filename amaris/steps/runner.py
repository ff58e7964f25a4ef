"""Runs step flows on their own event loop, in a thread of the API process.

Prefect's engine does real CPU work per task run (state transitions, result
persistence). On its own loop and thread it cannot stall ``/score``; the hot path
and the step path also use separate gateways, so neither waits on the other's
connection pool or semaphores.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import gc
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from prefect.context import AsyncClientContext, SyncClientContext

T = TypeVar("T")
log = logging.getLogger("amaris.pipeline")

FINISH_GRACE_S = 1.0
"""How long a stopping pipeline waits for the work :func:`finish_before_stop` was given
(a flow run's record after its outcome) before it cancels every task."""

_runner: contextvars.ContextVar[PipelineRunner | None] = contextvars.ContextVar(
    "amaris_pipeline_runner", default=None
)
_unowned: set[asyncio.Task[Any]] = set()
"""Work given to :func:`finish_before_stop` off a pipeline loop: held until it ends."""


def finish_before_stop(task: asyncio.Task[Any], what: str) -> None:
    """Let ``task``, the rest of work whose result is already told (``what`` it is, for
    the log), run on: the pipeline's stop waits up to :data:`FINISH_GRACE_S` for it
    rather than cancel it with the running flows; its failure is logged."""

    def ended(done: asyncio.Task[Any]) -> None:
        if not done.cancelled() and (error := done.exception()) is not None:
            log.warning("%s failed after its outcome was told: %s", what, error)

    task.add_done_callback(ended)
    runner = _runner.get()
    held = _unowned if runner is None else runner._finishing
    held.add(task)
    task.add_done_callback(held.discard)


class PipelineRunner:
    """A daemon thread owning an event loop for step flows.

    ``on_start`` runs first on the loop; ``on_stop`` last, once its tasks are cancelled
    (what holds connections on this loop closes them here, while the loop still runs)."""

    def __init__(
        self,
        on_start: Callable[[], Coroutine[Any, Any, None]],
        on_stop: Callable[[], Coroutine[Any, Any, None]] | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        # The thread runs in a copy of the creator's context, so Prefect settings set there
        # (a test harness, a profile) apply to the flows too.
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run,), name="amaris-pipeline", daemon=True
        )
        self._on_start = on_start
        self._on_stop = on_stop
        self.ready = concurrent.futures.Future[None]()
        self._holder: asyncio.Task[None] | None = None
        self._finishing: set[asyncio.Task[Any]] = set()
        # The context flows run in: it holds the loop's Prefect clients once they are open.
        self._flow_context = context

    def start(self) -> None:
        """Start the thread (and warm Prefect up in it)."""
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        _runner.set(self)
        try:
            self._loop.run_until_complete(self._start())
        except asyncio.CancelledError:  # stop() during start-up: nothing to report
            self._settle_ready(RuntimeError("the pipeline stopped during start-up"))
        except Exception as exc:  # reported through `ready`; the API stays up
            log.exception("pipeline start-up failed")
            self._settle_ready(exc)
        else:
            # Prefect's warm-up loaded objects that live as long as the process: keep them
            # out of full collections too (see Services.start).
            gc.collect()
            gc.freeze()
            self._settle_ready(None)
        self._loop.run_forever()

    async def _start(self) -> None:
        await self._on_start()
        opened = asyncio.get_running_loop().create_future()
        # Lives until stop() cancels it, which closes the clients.
        self._holder = asyncio.create_task(self._hold_clients(opened))
        await opened

    async def _hold_clients(self, opened: asyncio.Future[None]) -> None:
        """Every flow run on this loop shares one Prefect client pair: without one, each run
        builds an async and a sync client (and a TLS context for each) on the critical path."""
        try:
            async with AsyncClientContext.get_or_create():
                with SyncClientContext.get_or_create():
                    self._flow_context = contextvars.copy_context()
                    opened.set_result(None)
                    await asyncio.Event().wait()
        except Exception as exc:
            if not opened.done():
                opened.set_exception(exc)
                return
            raise

    def _settle_ready(self, error: BaseException | None) -> None:
        # A waiter cancelled while start-up ran may have cancelled `ready` with it.
        if self.ready.done():
            return
        if error is None:
            self.ready.set_result(None)
        else:
            self.ready.set_exception(error)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the pipeline loop, once start-up (Prefect warm-up) is over."""

        async def gated() -> T:
            await asyncio.wrap_future(self.ready)
            # Awaiting the task cancels it when `gated` is cancelled.
            return await asyncio.get_running_loop().create_task(
                coro, context=self._flow_context.copy()
            )

        return asyncio.run_coroutine_threadsafe(gated(), self._loop)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop; running flows are abandoned (their steps stay resumable), once the
        work given to :func:`finish_before_stop` has ended (or its grace is over)."""
        if not self._thread.is_alive():
            return

        async def _shutdown() -> None:
            if self._finishing:
                await asyncio.wait(set(self._finishing), timeout=FINISH_GRACE_S)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._on_stop is not None:
                try:
                    await self._on_stop()
                except Exception:  # stopping goes on: the loop must still end
                    log.exception("pipeline stop: closing its connections failed")

        try:
            asyncio.run_coroutine_threadsafe(_shutdown(), self._loop).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            log.warning("pipeline tasks did not stop within %s s", timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
