"""A generous outer bound for code that must finish: the call runs in a daemon thread and
the test fails if it is still running after the bound (never a timed assertion on speed:
the bound is minutes where the work takes milliseconds; it only turns a hang into a
failure)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

BOUND_S = 60.0
"""How long a call may run before the test calls it hung."""


def finishes(call: Callable[[], T], bound_s: float = BOUND_S) -> T:
    """``call()``'s result; fails the test when it has not returned within ``bound_s``."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the test's thread below
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(bound_s)
    if worker.is_alive():
        raise AssertionError(f"still running after {bound_s:.0f} s: the work hangs")
    if errors:
        raise errors[0]
    return result[0]
