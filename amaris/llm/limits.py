"""How many requests one gateway has outstanding, and how long one may take.

Three limits, each optional: per agent (``concurrency.<agent>``), per endpoint (the least
``client.<agent>.request_limit`` of the agents that send to it), and in total
(``concurrency.total``); then the timeout backstop around the request itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

from amaris.llm.providers import ChatProvider
from amaris.settings import Settings

TIMEOUT_GRACE_SECONDS = 5.0
"""Added to the agent's timeout for the backstop: the SDK (the transport) enforces the
timeout itself; this is for providers and proxies that ignore it."""


class Limits:
    """The semaphores of one gateway, entered as one context manager (:meth:`slot`)."""

    def __init__(self, settings: Settings, providers: Mapping[str, ChatProvider]) -> None:
        limits = settings.concurrency
        self._total = asyncio.Semaphore(limits.total) if limits.total else None
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

    @asynccontextmanager
    async def slot(self, agent: str, endpoint: str, timeout: float) -> AsyncIterator[None]:
        """Hold a slot of every limit ``agent``'s request to ``endpoint`` is under, then
        bound the body by ``timeout`` (plus :data:`TIMEOUT_GRACE_SECONDS`): the wait for a
        slot does not count against it.

        Raises:
            TimeoutError: the body outlasted the backstop.
        """
        async with AsyncExitStack() as stack:
            # The agent's own limit first, then its endpoint's: a call queued behind one
            # must not hold a slot of the next that another agent's call could use.
            for limit in (self._per_agent.get(agent), self._per_endpoint.get(endpoint)):
                if limit is not None:
                    await stack.enter_async_context(limit)
            if self._total is not None:
                await stack.enter_async_context(self._total)
            async with asyncio.timeout(timeout + TIMEOUT_GRACE_SECONDS):
                yield
