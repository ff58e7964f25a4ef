"""Whether each agent's LLM endpoint answers, known before the first reward needs it.

``amaris serve`` probes every endpoint an agent is configured with (the offline agents have
none) in the background at start-up, then every ``server.probe_judges_seconds``: a request
for its model list. An endpoint that answers anything, an HTTP error included, is
reachable; one that refuses the connection or does not answer within the agent's timeout
(at most :data:`PROBE_TIMEOUT_S`) is not. ``/healthz`` shows each agent's state and since
when; a change is logged (a warning when an endpoint becomes unreachable).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import openai

from amaris.llm.providers import ChatProvider
from amaris.redact import redact_url

log = logging.getLogger("amaris.llm")

PROBE_TIMEOUT_S = 10.0
"""Longest wait for one endpoint's answer (less when the agent's own timeout is)."""


@dataclass(frozen=True)
class Reachability:
    """An endpoint's state: reachable or not, since when (Unix time), and why not."""

    reachable: bool
    since: float
    error: str | None = None


async def probe(provider: ChatProvider, timeout: float) -> str | None:
    """Why ``provider``'s endpoint is unreachable; None when it answered."""
    try:
        await provider.models(timeout)
    except (openai.APIConnectionError, TimeoutError) as exc:  # APITimeoutError included
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    except openai.APIStatusError:
        return None  # it answered
    return None


class Reachabilities:
    """The state of every agent's endpoint, probed now and then."""

    def __init__(self, providers: Mapping[str, ChatProvider], timeouts: Mapping[str, float]):
        self._agents = {agent: p for agent, p in providers.items() if not p.offline}
        self._timeouts = timeouts
        self._states: dict[str, Reachability] = {}

    def states(self) -> dict[str, Reachability]:
        """Each probed agent's state (an agent not probed yet is left out)."""
        return dict(self._states)

    async def probe_all(self) -> None:
        """Probe each endpoint once (agents sharing one are probed once) and record it."""
        endpoints: dict[str, list[str]] = {}
        for agent, provider in self._agents.items():
            endpoints.setdefault(provider.description, []).append(agent)
        found = await asyncio.gather(
            *(
                probe(
                    self._agents[agents[0]],
                    min(PROBE_TIMEOUT_S, *(self._timeouts.get(a, PROBE_TIMEOUT_S) for a in agents)),
                )
                for agents in endpoints.values()
            )
        )
        now = time.time()
        for (endpoint, agents), error in zip(endpoints.items(), found, strict=True):
            for agent in agents:
                self._record(agent, endpoint, error, now)

    def _record(self, agent: str, endpoint: str, error: str | None, now: float) -> None:
        before = self._states.get(agent)
        if before is not None and before.reachable == (error is None):
            self._states[agent] = Reachability(before.reachable, before.since, error)
            return
        self._states[agent] = Reachability(error is None, now, error)
        if error is not None:
            log.warning("%s's endpoint %s is unreachable: %s", agent, redact_url(endpoint), error)
        elif before is not None:
            log.warning("%s's endpoint %s is reachable again", agent, redact_url(endpoint))

    async def run(self, every: float) -> None:
        """Probe now, then every ``every`` seconds, until cancelled."""
        while True:
            try:
                await self.probe_all()
            except Exception:  # a probe's own bug must not end the loop
                log.exception("probing the LLM endpoints failed; trying again later")
            await asyncio.sleep(every)
