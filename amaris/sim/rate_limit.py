"""Rate limits the offline LLM server enforces, as a hosted API does: requests and tokens a
minute, a 429 past them, and the ``x-ratelimit-*`` headers on every answer.

Each limit is a token bucket holding ``burst_seconds`` of its rate (a minute's by default,
as a provider's per-minute limit; less to enforce it over shorter periods, as providers
also do), filled continuously. A request is admitted when one request and its tokens (the
prompt and completion tokens the server reports in its ``usage``) are there, else refused
with a 429 that says when to come back (``retry-after``, ``retry-after-ms``). Every answer
carries ``x-ratelimit-limit-*``, ``x-ratelimit-remaining-*`` and ``x-ratelimit-reset-*``
(seconds until the bucket is full, written ``1.5s``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from amaris.sim.judge_server import Reply, Responder, usage_tokens
from amaris.sim.wire import ChatRequest


@dataclass(frozen=True)
class RateLimit:
    """What the server enforces; None: no limit of that kind."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    burst_seconds: float = 60.0
    """Seconds of its rate a bucket holds."""


@dataclass
class _Bucket:
    per_minute: int
    capacity: float
    level: float
    stamp: float

    @property
    def rate(self) -> float:
        return self.per_minute / 60.0

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def short_by(self, cost: float) -> float:
        """Seconds until ``cost`` is there (a cost over the capacity: until full)."""
        return max(0.0, (min(cost, self.capacity) - self.level) / self.rate)


class EnforcedLimits:
    """The server's buckets, and how many requests it admitted and refused."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        now = clock()
        self._buckets: dict[str, _Bucket] = {}
        for kind, per_minute in (
            ("requests", limit.requests_per_minute),
            ("tokens", limit.tokens_per_minute),
        ):
            if per_minute:
                capacity = max(1.0, per_minute / 60.0 * limit.burst_seconds)
                self._buckets[kind] = _Bucket(per_minute, capacity, capacity, now)
        self.admitted = 0
        self.refused = 0

    def admit(self, tokens: int) -> tuple[bool, dict[str, str]]:
        """Take one request and ``tokens`` when both are there: (admitted, the headers)."""
        now = self._clock()
        costs = {"requests": 1, "tokens": tokens}
        wait = 0.0
        for kind, bucket in self._buckets.items():
            bucket.refill(now)
            wait = max(wait, bucket.short_by(costs[kind]))
        if wait == 0.0:
            for kind, bucket in self._buckets.items():
                bucket.level -= costs[kind]
            self.admitted += 1
        else:
            self.refused += 1
        headers = {}
        for kind, bucket in self._buckets.items():
            headers[f"x-ratelimit-limit-{kind}"] = str(bucket.per_minute)
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, math.floor(bucket.level)))
            full = (bucket.capacity - bucket.level) / bucket.rate
            headers[f"x-ratelimit-reset-{kind}"] = f"{full:.3f}s"
        if wait:
            headers["retry-after"] = str(math.ceil(wait))
            headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        return wait == 0.0, headers


def limited_responder(responder: Responder, limits: EnforcedLimits) -> Responder:
    """``responder`` behind ``limits``: an answer it would give is admitted (with the
    headers) or refused with a 429 at once; its errors and hangs pass as they are."""

    async def respond(body: ChatRequest) -> Reply:
        reply = await responder(body)
        if reply.status != 200 or reply.hang or reply.body is not None:
            return reply
        admitted, headers = limits.admit(sum(usage_tokens(body, reply)))
        if not admitted:
            return Reply(status=429, content="rate limit reached", headers=headers)
        reply.headers = {**reply.headers, **headers}
        return reply

    return respond
