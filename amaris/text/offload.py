"""Text work on a long input runs in a worker thread, a short one's on the event loop.

The matchers of :mod:`amaris.text` and the scoring path are linear in time (RE2, single
passes), but linear in 100,000 characters is still milliseconds: the pre-check took 7-13 ms on
a 100 KB reply, the offline judge 9-19 ms, the scorer's messages 1.5 ms
(bench/degenerate_replies.py, docs/benchmarks.md). Above a bound, such work goes to a thread
(RE2 and ``json`` release or share the interpreter lock in short slices), so the event loop
keeps answering other requests; below it, the thread hop would cost more than the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

OFF_LOOP_CHARS = 256
"""Longest rollout text (all its fields together) whose text work runs on the event loop.
With a 128-character reply, every degenerate family: pre-check <= 0.2 ms, an ``exact`` rule
<= 0.5 ms; with 512 characters an ``exact`` rule took up to 1.4 ms
(bench/off_loop_work.py, docs/benchmarks.md)."""


async def off_loop_above(
    chars: int, limit: int, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """``func(*args, **kwargs)``: inline when ``chars`` <= ``limit``, else in a worker
    thread (:func:`asyncio.to_thread`)."""
    if chars <= limit:
        return func(*args, **kwargs)
    return await asyncio.to_thread(func, *args, **kwargs)
