"""When a batch of judge calls is out: each call's request written to its endpoint (or
handed to an in-process judge), waiting behind a concurrency limit, or ended.

A caller with more work for the event loop after its calls (the set-up of a step's next
chunk, the memory writes beside the rubric update) holds it until they are out: done
while their requests are still being sent, it would hold them back, and every call
queued behind them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_report: ContextVar[Callable[[], None] | None] = ContextVar("amaris_llm_call_out", default=None)


def call_out() -> None:
    """Tell the running call's :class:`Batch` that the call is out (nothing outside one;
    a call's later reports, such as a retry's, change nothing)."""
    report = _report.get()
    if report is not None:
        report()


class Batch:
    """``calls`` judge calls, each awaited through :meth:`run` in its own task; ``then()``
    runs once every one of them is out (at once for none)."""

    def __init__(self, calls: int, then: Callable[[], None]) -> None:
        self._left = calls
        self._then = then
        if calls == 0:
            then()

    async def run(self, call: Awaitable[T]) -> T:
        """``call``'s result: one call of the batch, out when the judge layer reports it
        (:func:`call_out`) or when it ends, whichever comes first."""
        told = False

        def report() -> None:
            nonlocal told
            if told:
                return
            told = True
            self._left -= 1
            if self._left == 0:
                self._then()

        token = _report.set(report)
        try:
            return await call
        finally:
            _report.reset(token)
            report()
