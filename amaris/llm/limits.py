"""How many requests one gateway has outstanding, and how long one may take.

Three limits: per agent (``concurrency.<agent>``), per endpoint (the least
``client.<agent>.request_limit`` of the agents that send to it), each optional, and in
total (``concurrency.total``, never above :func:`in_flight_ceiling`); then the endpoint's
rate limits (:mod:`amaris.llm.rate_limits`), and the timeout backstop around the request
itself.
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType

from amaris.llm.outgoing import call_out
from amaris.llm.providers import ChatProvider
from amaris.settings import Settings

TIMEOUT_GRACE_SECONDS = 5.0
"""Added to the agent's timeout for the backstop: the SDK (the transport) enforces the
timeout itself; this is for providers and proxies that ignore it."""


def in_flight_ceiling(open_files: int | None = None) -> int:
    """The most requests one gateway has in flight whatever the settings: an eighth of the
    process's open-file limit (``open_files``, else its soft ``RLIMIT_NOFILE``; each
    request holds a connection, and the API's connections, the other gateway and the
    stores need theirs), 16 at least: with no limit set, a step of a dataset's rollouts
    would open a connection per analysis at once."""
    if open_files is None:
        open_files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if open_files == resource.RLIM_INFINITY:
            return 65536
    return max(16, open_files // 8)


class Limits:
    """The semaphores of one gateway, entered as one context manager (:meth:`slot`)."""

    def __init__(self, settings: Settings, providers: Mapping[str, ChatProvider]) -> None:
        limits = settings.concurrency
        ceiling = in_flight_ceiling()
        self._total = asyncio.Semaphore(min(limits.total or ceiling, ceiling))
        self._per_agent: dict[str, asyncio.Semaphore] = {
            agent: asyncio.Semaphore(slots)
            for agent in settings.served_agents
            if agent in providers and (slots := limits.get(agent))
        }
        # One limit per endpoint, shared by every agent that sends to it: a self-hosted
        # model serving a few requests at a time queues the rest here, where the wait
        # does not count against a request's timeout, instead of in its own queue.
        endpoint_limits: dict[str, int] = {}
        for agent in settings.served_agents:
            provider = providers.get(agent)
            slots = settings.client.for_agent(agent).request_limit
            if provider is not None and not provider.offline and slots is not None:
                key = provider.description
                endpoint_limits[key] = min(slots, endpoint_limits.get(key, slots))
        self._per_endpoint = {
            key: asyncio.Semaphore(slots) for key, slots in endpoint_limits.items()
        }

    def slot(
        self,
        agent: str,
        endpoint: str,
        timeout: float,
        pace: Callable[[], Awaitable[object]] | None = None,
    ) -> Slot:
        """Hold a slot of every limit ``agent``'s request to ``endpoint`` is under, then wait
        for ``pace`` (the endpoint's rate limits: after the slots, so a request goes when
        its turn comes, not in a burst of those that waited for slots), then bound the body
        by ``timeout`` (plus :data:`TIMEOUT_GRACE_SECONDS`): neither wait counts against it.

        Raises:
            TimeoutError: the body outlasted the backstop.
        """
        # The agent's own limit first, then its endpoint's, then the total: a call queued
        # behind one must not hold a slot of the next that another agent's call could use.
        held = tuple(
            limit
            for limit in (
                self._per_agent.get(agent),
                self._per_endpoint.get(endpoint),
                self._total,
            )
            if limit is not None
        )
        return Slot(held, timeout + TIMEOUT_GRACE_SECONDS, pace)


class Slot:
    """The context manager of :meth:`Limits.slot`: its semaphores taken in order (those
    taken released if a later wait is cancelled), the pace, then the backstop's timeout.

    A class rather than a generator in an exit stack: it is entered once per judge call,
    on the event loop, so each attempt's cost is kept to the waits themselves.
    """

    __slots__ = ("_limits", "_pace", "_seconds", "_taken", "_timeout")

    def __init__(
        self,
        limits: tuple[asyncio.Semaphore, ...],
        seconds: float,
        pace: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self._limits = limits
        self._taken = 0
        self._seconds = seconds
        self._pace = pace
        self._timeout: asyncio.Timeout | None = None

    async def __aenter__(self) -> None:
        try:
            for limit in self._limits:
                if limit.locked():
                    call_out()  # its turn comes without its caller
                await limit.acquire()
                self._taken += 1
            if self._pace is not None:
                await self._pace()
            self._timeout = asyncio.timeout(self._seconds)
            await self._timeout.__aenter__()
        except BaseException:
            self._release()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            assert self._timeout is not None
            await self._timeout.__aexit__(exc_type, exc, tb)
        finally:
            self._release()

    def _release(self) -> None:
        # In reverse order, as an exit stack would.
        while self._taken:
            self._taken -= 1
            self._limits[self._taken].release()
