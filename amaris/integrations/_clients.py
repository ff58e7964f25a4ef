"""The adapters' clients of amaris (:class:`amaris.client.RewardClient`), kept from one
call to the next.

verl calls its reward function once per sample. A new ``httpx`` client for each call
builds a TLS context that parses the CA bundle (for an ``http://`` URL too) and opens a
new connection: the trainer's CPU on every sample, on the event loop's thread in the async
path, which caps a reward worker however fast amaris answers (docs/benchmarks.md). A kept
client pays that once and reuses its connections.

One client per amaris target (URL, key, timeout) in a process for the blocking calls (its
``httpx.Client`` "can be shared between threads"), and one per target and event loop for
the async ones (an ``httpx.AsyncClient``'s connections belong to the loop that opened
them). A process forked from one that had clients makes its own: the parent's
connections are not its. An event loop that has been closed loses its clients at the next
call (they cannot be closed without it; their sockets close when they are collected).
"""

from __future__ import annotations

import asyncio
import os
import threading

from amaris.client import RewardClient

Key = tuple[str, str | None, float]
"""An amaris target's URL, API key and timeout."""

_lock = threading.Lock()
_pid = os.getpid()
_sync: dict[Key, RewardClient] = {}
_async: dict[asyncio.AbstractEventLoop, dict[Key, RewardClient]] = {}


def _forked() -> None:
    """Forget the clients of the process this one was forked from (under ``_lock``)."""
    global _pid
    if os.getpid() != _pid:
        _pid = os.getpid()
        _sync.clear()
        _async.clear()


def sync_client(url: str, api_key: str | None, timeout: float) -> RewardClient:
    """This process's client for the blocking calls to ``url`` (``timeout`` seconds per
    request)."""
    with _lock:
        _forked()
        client = _sync.get((url, api_key, timeout))
        if client is None:
            client = _sync[url, api_key, timeout] = RewardClient(url, timeout, api_key)
        return client


def async_client(url: str, api_key: str | None, timeout: float) -> RewardClient:
    """The running event loop's client for ``url`` (``timeout`` seconds per request).

    Raises:
        RuntimeError: no event loop is running in this thread.
    """
    loop = asyncio.get_running_loop()
    with _lock:
        _forked()
        for closed in [other for other in _async if other.is_closed()]:
            del _async[closed]
        clients = _async.setdefault(loop, {})
        client = clients.get((url, api_key, timeout))
        if client is None:
            client = clients[url, api_key, timeout] = RewardClient(url, timeout, api_key)
        return client
