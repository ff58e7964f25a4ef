"""Waiting for a process's HTTP server to answer, with one HTTP client for the whole wait.

``httpx.get`` builds a new client for each call, and with it a TLS context that parses the
CA bundle, for a plain-HTTP URL too: costly, and a wait that polls that way takes CPU from
the server it waits for, starting on the same cores. One client for the wait pays for its
TLS context once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx


def wait_ok(
    url: str,
    alive: Callable[[], None],
    timeout: float,
    interval: float,
    pause: Callable[[float], object] = time.sleep,
) -> bool:
    """Poll ``GET url`` until it answers 200 (True) or ``timeout`` seconds pass (False).

    ``alive()`` runs before each poll and raises to end the wait (the process exited, the
    wait was called off); ``pause(interval)`` runs between polls. A poll waits 2 s at most
    for its answer. Environment proxies are not used: the URL is a local server's.
    """
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            alive()
            try:
                if client.get(url).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            if time.monotonic() >= deadline:
                return False
            pause(interval)
