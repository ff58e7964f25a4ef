"""Text work on a long input runs in a worker thread, a short one's on the event loop.

The matchers of :mod:`amaris.text` and the scoring path are linear in time (RE2, single
passes), but linear in a 100 KB reply is still a noticeable stall of the event loop (the
pre-check, the offline judge, the scorer's messages). Above a bound, such work goes to a thread
(RE2 and ``json`` release or share the interpreter lock in short slices), so the event loop
keeps answering other requests; below it, the thread hop would cost more than the work.

Such work runs on one dedicated thread, not on the event loop's default executor (several
threads): the work is mostly Python holding the interpreter lock, so more threads add no
throughput, and every extra thread contending for the lock delays the event loop each time
it needs the lock back (``/healthz`` would wait behind them all under load).
Blocking I/O (SQLite, files) keeps using :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

OFF_LOOP_CHARS = 256
"""Longest rollout text (all its fields together) whose text work runs on the event loop:
below it the work costs less than the thread hop would."""


TEXT_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amaris-text")
"""The one thread that runs text work off the event loop, in arrival order (process-wide:
every event loop of the process shares it)."""


async def off_loop(func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``func(*args, **kwargs)`` on :data:`TEXT_THREAD`, with the caller's context variables
    (as :func:`asyncio.to_thread` passes them)."""
    call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(TEXT_THREAD, call)


async def off_loop_above(
    chars: int, limit: int, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """``func(*args, **kwargs)``: inline when ``chars`` <= ``limit``, else in a worker
    thread (:func:`off_loop`)."""
    if chars <= limit:
        return func(*args, **kwargs)
    return await off_loop(func, *args, **kwargs)
