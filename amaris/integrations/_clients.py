"""The adapters' HTTP clients, kept from one reward call to the next.

verl calls its reward function once per sample. A new ``httpx`` client for each call
builds a TLS context that parses the CA bundle (for an ``http://`` URL too) and opens a
new connection: ~50 ms of the trainer's CPU a sample on the two-core test machine, on
the event loop's thread in the async path, which capped a reward worker at ~17 samples
a second however fast amaris answered (``python -m bench.performance.reward_call_cpu``).
A kept client pays that once and reuses its connections.

One synchronous client per amaris target (URL, timeout) in a process (``httpx.Client``
"can be shared between threads"), and one asynchronous client per target and event loop
(an ``httpx.AsyncClient``'s connections belong to the loop that opened them). A process
forked from one that had clients makes its own: the parent's connections are not its.
An event loop that has been closed loses its clients at the next call (they cannot be
closed without it; their sockets close when they are collected).
"""

from __future__ import annotations

import asyncio
import os
import threading

import httpx

Key = tuple[str, float]
"""An amaris target's URL and timeout."""

_lock = threading.Lock()
_pid = os.getpid()
_sync: dict[Key, httpx.Client] = {}
_async: dict[asyncio.AbstractEventLoop, dict[Key, httpx.AsyncClient]] = {}


def _forked() -> None:
    """Forget the clients of the process this one was forked from (under ``_lock``)."""
    global _pid
    if os.getpid() != _pid:
        _pid = os.getpid()
        _sync.clear()
        _async.clear()


def sync_client(url: str, timeout: float) -> httpx.Client:
    """This process's client for ``url`` with ``timeout`` seconds per request."""
    with _lock:
        _forked()
        client = _sync.get((url, timeout))
        if client is None:
            client = _sync[url, timeout] = httpx.Client(base_url=url, timeout=timeout)
        return client


def async_client(url: str, timeout: float) -> httpx.AsyncClient:
    """The running event loop's client for ``url`` with ``timeout`` seconds per request.

    Raises:
        RuntimeError: no event loop is running in this thread.
    """
    loop = asyncio.get_running_loop()
    with _lock:
        _forked()
        for closed in [other for other in _async if other.is_closed()]:
            del _async[closed]
        clients = _async.setdefault(loop, {})
        client = clients.get((url, timeout))
        if client is None:
            client = clients[url, timeout] = httpx.AsyncClient(base_url=url, timeout=timeout)
        return client
