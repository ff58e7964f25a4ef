"""The endpoints' rate limits (``amaris.llm.rate_limits``): token buckets of requests and
tokens a minute that a request waits for in line, settled with its real usage, adapted to
what the endpoint's ``x-ratelimit-*`` and ``retry-after`` headers say; and those headers'
reading (``amaris.llm.rate_headers``)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import pytest

from amaris.llm.rate_headers import RateHeaders, duration, read_rate_headers
from amaris.llm.rate_limits import MAX_HOLD_SECONDS, Gate, RateLimits


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def test_durations_are_read_as_endpoints_write_them() -> None:
    assert duration("1s") == 1.0
    assert duration("6m0s") == 360.0
    assert duration("20ms") == pytest.approx(0.02)
    assert duration("1h2m3.5s") == pytest.approx(3723.5)
    assert duration("0.25") == 0.25
    assert duration(" 2S ") == 2.0
    for bad in ("", "soon", "1x", "-1s", "1s" * 30, "nan", "m"):
        assert duration(bad) is None, bad


def test_the_headers_of_a_response_are_read_and_short_ones_only() -> None:
    read = read_rate_headers(
        {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-limit-tokens": "30000",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-requests": "120ms",
            "x-ratelimit-reset-tokens": "1m30s",
            "retry-after": "7",
        }
    )
    assert read == RateHeaders(500, 30000, 499, 0, 0.12, 90.0, 7.0)
    assert read is not None and read.wait == 7.0
    assert read_rate_headers({"retry-after": "3", "retry-after-ms": "250"}) == RateHeaders(
        retry_after=0.25
    )
    # a limit with nothing left: its reset is the wait
    assert RateHeaders(remaining_tokens=0, reset_tokens=2.0, reset_requests=9.0).wait == 2.0
    assert RateHeaders(remaining_tokens=5, reset_tokens=2.0).wait is None
    assert read_rate_headers({"content-type": "application/json"}) is None
    assert read_rate_headers({"x-ratelimit-remaining-requests": "9" * 100}) is None
    assert read_rate_headers({"x-ratelimit-remaining-requests": "-3"}) is None
    dated = read_rate_headers({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert dated == RateHeaders(retry_after=0.0)  # a date gone by: no wait


def test_a_request_bucket_holds_a_second_of_its_rate_and_refills_continuously() -> None:
    clock = Clock()
    gate = Gate(clock)
    gate.limit(600, None)  # 10 a second
    assert [gate.try_take(0) for _ in range(11)] == [True] * 10 + [False]
    clock.now += 0.099
    assert not gate.try_take(0)
    clock.now += 0.002
    assert gate.try_take(0)
    clock.now += 60  # a quiet minute banks one second's worth, no more
    assert [gate.try_take(0) for _ in range(11)] == [True] * 10 + [False]


def test_a_token_bucket_takes_the_estimate_and_settles_the_real_usage() -> None:
    clock = Clock()
    gate = Gate(clock)
    gate.limit(None, 6000)  # 100 tokens a second, 100 at once
    assert gate.counts_tokens
    assert gate.try_take(80)
    assert not gate.try_take(80)
    gate.settle(80, 20)  # it used 20: 60 back
    assert gate.try_take(80)
    # a request larger than the bucket goes when it is full, and leaves it owing
    clock.now += 1.0
    assert gate.try_take(250)
    clock.now += 2.49
    assert not gate.try_take(100)
    clock.now += 0.02
    assert gate.try_take(100)
    gate.settle(10, 60)  # used more than estimated: the difference is taken
    clock.now += 0.45
    assert not gate.try_take(1)
    clock.now += 0.06
    assert gate.try_take(1)


def test_the_least_limit_configured_holds_and_headers_lower_or_set_it() -> None:
    clock = Clock()
    gate = Gate(clock)
    assert gate.limits() == {} and not gate.counts_tokens
    gate.observe(RateHeaders(limit_requests=1200, limit_tokens=90_000))
    assert gate.limits() == {"requests": 1200, "tokens": 90_000}  # learned
    gate.limit(600, 120_000)
    gate.limit(900, None)
    assert gate.limits() == {"requests": 600, "tokens": 90_000}
    gate.observe(RateHeaders(limit_requests=300))
    assert gate.limits()["requests"] == 300  # the endpoint's is lower
    gate.observe(RateHeaders(limit_requests=5000))
    assert gate.limits()["requests"] == 600  # never above the configured one


def test_remaining_lowers_the_bucket_and_an_exhausted_limit_without_one_holds() -> None:
    clock = Clock()
    gate = Gate(clock)
    gate.limit(600, None)
    gate.observe(RateHeaders(remaining_requests=0, reset_requests=30.0))
    assert not gate.try_take(0)
    clock.now += 0.1  # its bucket refills at its rate: no wait for the reset
    assert gate.try_take(0)
    # nothing remaining of the tokens, for which amaris has no bucket: held until the reset
    gate.observe(RateHeaders(remaining_tokens=0, reset_tokens=2.0))
    clock.now += 1.9
    assert not gate.try_take(0)
    clock.now += 0.2
    assert gate.try_take(0)


def test_a_429_holds_every_request_for_its_retry_after_a_minute_at_most() -> None:
    clock = Clock()
    gate = Gate(clock)
    gate.observe(RateHeaders(retry_after=5.0))  # not a refusal: nothing held
    assert gate.try_take(0)
    gate.observe(RateHeaders(retry_after=5.0), refused=True)
    clock.now += 4.9
    assert not gate.try_take(0)
    clock.now += 0.2
    assert gate.try_take(0)
    gate.observe(RateHeaders(retry_after=86_400.0), refused=True)
    clock.now += MAX_HOLD_SECONDS - 0.1
    assert not gate.try_take(0)
    clock.now += 0.2
    assert gate.try_take(0)


async def test_waiters_go_in_arrival_order_at_the_rate() -> None:
    limits = RateLimits()
    gate = limits.gate("http://judge/v1", "m")
    gate.limit(1200, None)  # 20 a second, 20 at once
    order: list[int] = []

    async def one(i: int) -> None:
        await limits.pace("scorer", gate, 0)
        order.append(i)

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(30)))
    elapsed = time.monotonic() - started
    assert order == list(range(30))
    assert elapsed >= 0.45  # 10 beyond the burst, at 20 a second
    waited = limits.waited()
    assert set(waited) == {("scorer", "requests")}
    assert waited["scorer", "requests"] >= 0.45 * 5  # the 10 waited 0.05 to 0.5 s each
    assert limits.waiting() == {"scorer": 0}


async def test_a_refund_wakes_the_first_waiter_before_its_time() -> None:
    gate = Gate()
    gate.limit(None, 600)  # 10 tokens a second
    assert gate.try_take(10)
    waiting = asyncio.ensure_future(gate.wait(10))  # would wait a second
    await asyncio.sleep(0.05)
    gate.settle(10, 1)
    seconds, kind = await asyncio.wait_for(waiting, 0.5)
    assert seconds < 0.3 and kind == "tokens"


async def test_a_cancelled_waiter_gives_up_its_place() -> None:
    gate = Gate()
    gate.limit(600, None)
    while gate.try_take(0):
        pass
    first = asyncio.ensure_future(gate.wait(0))
    second = asyncio.ensure_future(gate.wait(0))
    await asyncio.sleep(0.01)
    first.cancel()
    seconds, kind = await asyncio.wait_for(second, 1.0)
    assert first.cancelled() and 0.05 < seconds < 0.5 and kind == "requests"


def test_two_event_loops_share_one_gate() -> None:
    # The scoring path and the step pipeline run on two loops in two threads.
    limits = RateLimits()
    gate = limits.gate("http://judge/v1", "m")
    gate.limit(1200, None)
    done: list[float] = []

    def path() -> None:
        async def run() -> None:
            await asyncio.gather(*(limits.pace("scorer", gate, 0) for _ in range(15)))

        asyncio.run(run())
        done.append(time.monotonic())

    started = time.monotonic()
    threads = [threading.Thread(target=path) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(done) == 2
    assert max(done) - started >= 0.45  # 30 in all: 20 at once, 10 at 20 a second
