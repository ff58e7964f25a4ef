"""Rate limits of the endpoints: requests and tokens a minute, kept to before they bite.

One :class:`Gate` per endpoint and model, shared by every agent that sends to it and by
both gateways (the scoring path and the step pipeline, on two event loops: a gate is
thread-safe and wakes a waiter on its own loop). A gate holds two token buckets,
``client.<agent>.requests_per_minute`` and ``client.<agent>.tokens_per_minute`` (the least
of the agents sending to it), each filled continuously at its rate and holding
:data:`BURST_SECONDS` of it (one request at least), and a hold: a time before which
nothing is sent. A request takes one request and the estimate of its tokens (its prompt
plus ``max_tokens``) when both suffice, in arrival order; its real ``usage`` then settles
the difference (:meth:`Gate.settle`). A request larger than a bucket goes when the bucket
is full and leaves it below zero, so the next waits for what it took.

What the endpoint says adapts a gate (:meth:`Gate.observe`): a ``x-ratelimit-limit-*``
under the configured limit (or with none configured) becomes the bucket's rate; a
``remaining`` lowers the bucket to it; nothing remaining of a limit amaris has no bucket
for, or a 429's ``retry-after``, holds every request until then (at most
:data:`MAX_HOLD_SECONDS` at a time).

The buckets are written here rather than taken from ``aiolimiter``: its limiter takes an
amount but never gives one back or takes more after the fact (the settle step a token
estimate needs), and its level cannot be set from an endpoint's headers without its
private state.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

from amaris.llm.providers import ChatProvider
from amaris.llm.rate_headers import RateHeaders
from amaris.settings import Settings

Kind = Literal["requests", "tokens", "endpoint"]
"""What a wait was for: the request bucket, the token bucket, or the endpoint's word (a
``retry-after``, or a limit with nothing remaining until its reset)."""
KINDS: tuple[Kind, ...] = get_args(Kind)
BucketKind = Literal["requests", "tokens"]
BURST_SECONDS = 1.0
"""Seconds of its rate a bucket holds: what may go at once after a quiet spell. Providers
enforce a minute's limit over shorter periods too (a second's share), so no more."""
MAX_HOLD_SECONDS = 60.0
"""Longest one hold from the endpoint's headers: a longer ``retry-after`` is waited out a
minute at a time (the next refusal holds again)."""
POLL_SECONDS = 1.0
"""How often a waiter behind the first looks whether the first is still there."""
_EPSILON = 1e-9
"""What a bucket may lack and still give (a rate's fractions add up with rounding)."""

Clock = Callable[[], float]


@dataclass
class _Bucket:
    """``rate`` units a second, at most ``capacity`` stored; ``level`` may go below zero."""

    per_minute: int
    level: float
    stamp: float

    @property
    def rate(self) -> float:
        return self.per_minute / 60.0

    @property
    def capacity(self) -> float:
        return max(1.0, self.rate * BURST_SECONDS)

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def delay(self, cost: float) -> float:
        """Seconds until ``cost`` may be taken (a cost over the capacity: until full)."""
        lack = min(cost, self.capacity) - self.level
        return lack / self.rate if lack > _EPSILON else 0.0


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    woken: asyncio.Future[None]


def _costs(tokens: int) -> tuple[tuple[BucketKind, int], ...]:
    """What one request takes of each bucket."""
    return (("requests", 1), ("tokens", tokens))


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Gate:
    """The rate limits of one endpoint and model (see the module's doc)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._configured: dict[BucketKind, int] = {}
        self._stated: dict[BucketKind, int] = {}
        """The limits the endpoint's headers stated last."""
        self._buckets: dict[BucketKind, _Bucket] = {}
        self._held_until = 0.0
        self._queue: deque[_Waiter] = deque()
        self._binding: Kind = "requests"

    def limit(self, requests_per_minute: int | None, tokens_per_minute: int | None) -> None:
        """Configure the limits (the least of those given so far, per kind)."""
        with self._lock:
            now = self._clock()
            limits: tuple[tuple[BucketKind, int | None], ...] = (
                ("requests", requests_per_minute),
                ("tokens", tokens_per_minute),
            )
            for kind, value in limits:
                if value is not None:
                    known = self._configured.get(kind)
                    self._configured[kind] = value if known is None else min(known, value)
                    self._set_rate(kind, now)

    def limits(self) -> dict[BucketKind, int]:
        """The limits a minute in force (configured, or lowered by the endpoint's word)."""
        with self._lock:
            return {kind: bucket.per_minute for kind, bucket in self._buckets.items()}

    @property
    def counts_tokens(self) -> bool:
        """Whether a request's tokens are counted (a token limit is known)."""
        return "tokens" in self._buckets

    def try_take(self, tokens: int) -> bool:
        """Take one request and ``tokens`` if nobody waits and both are there now."""
        with self._lock:
            if self._queue:
                return False
            delay, _ = self._delay(tokens, self._clock())
            if delay > 0:
                return False
            self._take(tokens)
            return True

    async def wait(self, tokens: int) -> tuple[float, Kind]:
        """Wait in line for one request and ``tokens``, take them: the seconds waited and
        what held the wait last. Cancelled, the place in line is given up."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop, loop.create_future())
        with self._lock:
            started = self._clock()
            self._queue.append(waiter)
        kind: Kind | None = None
        try:
            while True:
                with self._lock:
                    now = self._clock()
                    timeout = POLL_SECONDS
                    if self._queue and self._queue[0] is waiter:
                        delay, binding = self._delay(tokens, now)
                        if delay <= 0:
                            self._queue.popleft()
                            self._take(tokens)
                            self._wake_first()
                            return now - started, kind or self._binding
                        kind, timeout = binding, delay
                    elif self._queue and self._queue[0].loop.is_closed():
                        # The first's loop ended with it waiting: nobody will take its turn.
                        self._queue.popleft()
                        continue
                    waiter.woken = loop.create_future()
                try:
                    async with asyncio.timeout(timeout):
                        await waiter.woken
                except TimeoutError:
                    pass
        except BaseException:
            with self._lock:
                first = bool(self._queue) and self._queue[0] is waiter
                if waiter in self._queue:
                    self._queue.remove(waiter)
                if first:
                    self._wake_first()
            raise

    def settle(self, reserved: int, used: int) -> None:
        """A request that took ``reserved`` tokens used ``used``: the difference is given
        back (or taken)."""
        with self._lock:
            bucket = self._buckets.get("tokens")
            if bucket is None or reserved == used:
                return
            bucket.refill(self._clock())
            bucket.level = min(bucket.capacity, bucket.level + reserved - used)
            self._wake_first()

    def observe(self, headers: RateHeaders, refused: bool = False) -> None:
        """Adapt to what the endpoint said in a response's headers; ``refused``: it was a
        429, whose ``retry-after`` (else the reset of what ran out) holds every request."""
        with self._lock:
            now = self._clock()
            said: tuple[tuple[BucketKind, int | None, int | None, float | None], ...] = (
                (
                    "requests",
                    headers.limit_requests,
                    headers.remaining_requests,
                    headers.reset_requests,
                ),
                ("tokens", headers.limit_tokens, headers.remaining_tokens, headers.reset_tokens),
            )
            for kind, limit, remaining, reset in said:
                if limit:
                    self._stated[kind] = limit
                    self._set_rate(kind, now)
                bucket = self._buckets.get(kind)
                if remaining is None:
                    continue
                if bucket is not None:
                    bucket.refill(now)
                    bucket.level = min(bucket.level, float(remaining))
                elif remaining == 0 and reset is not None:
                    self._hold(now, reset)
            if refused and headers.wait is not None:
                self._hold(now, headers.wait)

    def _hold(self, now: float, seconds: float) -> None:
        self._held_until = max(self._held_until, now + min(seconds, MAX_HOLD_SECONDS))

    def _set_rate(self, kind: BucketKind, now: float) -> None:
        """The bucket of ``kind`` at the least of its configured and stated limits."""
        per_minute = min(
            limit for limit in (self._configured.get(kind), self._stated.get(kind)) if limit
        )
        bucket = self._buckets.get(kind)
        if bucket is None:
            bucket = self._buckets[kind] = _Bucket(per_minute, 0.0, now)
            bucket.level = bucket.capacity
        elif bucket.per_minute != per_minute:
            bucket.refill(now)
            bucket.per_minute = per_minute
            bucket.level = min(bucket.level, bucket.capacity)
        self._wake_first()

    def _delay(self, tokens: int, now: float) -> tuple[float, Kind]:
        """Seconds until one request and ``tokens`` may go, and what holds them longest."""
        delay = self._held_until - now
        kind: Kind = "endpoint"
        for name, cost in _costs(tokens):
            bucket = self._buckets.get(name)
            if bucket is not None:
                bucket.refill(now)
                wait = bucket.delay(cost)
                if wait > delay:
                    delay, kind = wait, name
        if delay > 0:
            self._binding = kind
        return delay, kind

    def _take(self, tokens: int) -> None:
        for name, cost in _costs(tokens):
            bucket = self._buckets.get(name)
            if bucket is not None:
                bucket.level -= cost

    def _wake_first(self) -> None:
        """Tell the first in line to look again (on its own loop)."""
        while self._queue:
            first = self._queue[0]
            try:
                first.loop.call_soon_threadsafe(_resolve, first.woken)
            except RuntimeError:  # its loop is closed: it waits no more
                self._queue.popleft()
                continue
            return


@dataclass
class RateLimits:
    """The gates of a process's endpoints, and what their waits cost each agent; shared by
    the service's two gateways."""

    clock: Clock = time.monotonic
    _gates: dict[tuple[str, str], Gate] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _waited: dict[tuple[str, Kind], float] = field(default_factory=dict)
    _waiting: Counter[str] = field(default_factory=Counter)

    def configure(self, settings: Settings, providers: Mapping[str, ChatProvider]) -> None:
        """Each served agent's ``client.<agent>.requests_per_minute`` / ``tokens_per_minute``
        on its endpoint and model's gate (the least of the agents' per gate)."""
        for agent in settings.served_agents:
            provider = providers.get(agent)
            if provider is None or provider.offline:
                continue
            client = settings.client.for_agent(agent)
            if client.requests_per_minute or client.tokens_per_minute:
                model = settings.agent_options(agent).model
                self.gate(provider.description, model).limit(
                    client.requests_per_minute, client.tokens_per_minute
                )

    def gate(self, endpoint: str, model: str) -> Gate:
        """The gate of ``model`` on ``endpoint`` (made on first use)."""
        key = (endpoint, model)
        gate = self._gates.get(key)
        if gate is None:
            with self._lock:
                gate = self._gates.setdefault(key, Gate(self.clock))
        return gate

    async def pace(self, agent: str, gate: Gate, tokens: int) -> tuple[float, Kind | None]:
        """Take one request and ``tokens`` of ``gate`` for ``agent``'s request, waiting for
        them if need be: the seconds waited and what for (None: no wait)."""
        if gate.try_take(tokens):
            return 0.0, None
        with self._lock:
            self._waiting[agent] += 1
        try:
            seconds, kind = await gate.wait(tokens)
        finally:
            with self._lock:
                self._waiting[agent] -= 1
        with self._lock:
            self._waited[(agent, kind)] = self._waited.get((agent, kind), 0.0) + seconds
        return seconds, kind

    def waited(self) -> dict[tuple[str, Kind], float]:
        """Seconds requests waited for a rate limit, by (agent, kind), since start."""
        with self._lock:
            return dict(self._waited)

    def waiting(self) -> dict[str, int]:
        """Requests waiting for a rate limit now, by agent."""
        with self._lock:
            return dict(self._waiting)
