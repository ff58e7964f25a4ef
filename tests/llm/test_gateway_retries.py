"""LLMGateway through real HTTP: transient retries, permanent errors, timeouts, concurrency."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from amaris.llm.gateway import LLMGateway, LLMUnavailableError
from amaris.sim.judge_server import Reply
from tests.support.fake_llm import FakeLLM
from tests.support.gateway import EXPECTED, GOOD, MESSAGES, Verdict, call_log, open_gateway

# --- transient errors -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429, 408, 529])
async def test_transient_status_is_retried(tmp_path: Path, fake_llm: FakeLLM, status: int) -> None:
    fake_llm.push(Reply(status=status, content="try later"), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
        stats = gateway.stats.copy()
    assert len(fake_llm.requests) == 2
    assert fake_llm.requests[0] == fake_llm.requests[1]  # the very same request again
    assert stats["scorer.errors"] == 1
    assert stats["scorer.calls"] == 1


async def test_mixed_transient_errors_then_success(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(
        Reply(status=500),
        Reply(status=503),
        Reply(status=429),
        Reply(content=GOOD),
        Reply(content='{"score": 0.1, "reason": "never asked"}'),
    )
    async with open_gateway(tmp_path, fake_llm, **{"gateway.max_attempts": 4}) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
    assert len(fake_llm.requests) == 4
    assert [x["attempt"] for x in call_log(tmp_path)] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Retry-After": "0"}, {"Retry-After": "0.02"}, {"Retry-After": "not-a-number"}],
)
async def test_rate_limit_retry_after(
    tmp_path: Path, fake_llm: FakeLLM, headers: dict[str, str]
) -> None:
    fake_llm.push(Reply(status=429, headers=headers), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
    assert len(fake_llm.requests) == 2


async def test_retry_after_is_honoured(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # Jitter alone would wait at most backoff_base (0.01 s); the hint asks for 0.4 s.
    fake_llm.push(Reply(status=429, headers={"Retry-After": "0.4"}), Reply(content=GOOD))
    overrides = {"gateway.backoff_max_seconds": 5.0}
    async with open_gateway(tmp_path, fake_llm, **overrides) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
    assert len(fake_llm.requests) == 2
    first, second = call_log(tmp_path)
    assert first["outcome"] == "transient_error"
    assert first["retry_in_s"] == 0.4  # the wait the gateway took before attempt 2
    assert second["outcome"] == "ok" and "retry_in_s" not in second


async def test_retry_after_is_capped_by_backoff_max(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(status=503, headers={"Retry-After": "3600"}), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:  # backoff_max_seconds: 0.05
        # capped, not 3600 s: a deadline, not a measurement
        answer = await asyncio.wait_for(gateway.structured("scorer", MESSAGES, Verdict), 60)
        assert answer == EXPECTED
    assert len(fake_llm.requests) == 2
    assert [x.get("retry_in_s") for x in call_log(tmp_path)] == [0.05, None]


async def test_backoff_without_a_hint_is_jittered_under_its_ceiling(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # base 0.1 s doubling per attempt, capped at 0.25 s: ceilings 0.1, 0.2, 0.25
    fake_llm.push(*[Reply(status=503)] * 4)
    overrides = {
        "gateway.max_attempts": 4,
        "gateway.backoff_base_seconds": 0.1,
        "gateway.backoff_max_seconds": 0.25,
    }
    async with open_gateway(tmp_path, fake_llm, **overrides) as gateway:
        with pytest.raises(LLMUnavailableError, match="4 attempts failed"):
            await gateway.structured("scorer", MESSAGES, Verdict)
    waits = [x.get("retry_in_s") for x in call_log(tmp_path)]
    assert waits[-1] is None  # no wait after the last attempt
    for wait, ceiling in zip(waits[:-1], [0.1, 0.2, 0.25], strict=True):
        assert wait is not None and 0 <= wait <= ceiling


@pytest.mark.parametrize("max_attempts", [1, 3])
async def test_budget_exhaustion(tmp_path: Path, fake_llm: FakeLLM, max_attempts: int) -> None:
    fake_llm.push(*[Reply(status=503, content="overloaded")] * (max_attempts + 2))
    async with open_gateway(tmp_path, fake_llm, **{"gateway.max_attempts": max_attempts}) as gw:
        with pytest.raises(LLMUnavailableError, match=f"{max_attempts} attempts failed") as info:
            await gw.structured("summarizer", MESSAGES, Verdict)
        stats = gw.stats.copy()
    assert "overloaded" in str(info.value)
    assert len(fake_llm.requests) == max_attempts
    assert stats["summarizer.errors"] == max_attempts
    assert stats["summarizer.calls"] == 0
    lines = call_log(tmp_path)
    assert [x["outcome"] for x in lines] == ["transient_error"] * max_attempts
    assert [x["attempt"] for x in lines] == list(range(1, max_attempts + 1))


# --- permanent errors -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 501])
async def test_permanent_status_is_not_retried(
    tmp_path: Path, fake_llm: FakeLLM, status: int
) -> None:
    fake_llm.push(Reply(status=status, content=f"refused {status}"), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm, **{"gateway.max_attempts": 4}) as gateway:
        with pytest.raises(LLMUnavailableError, match=f"refused {status}"):
            await gateway.structured("scorer", MESSAGES, Verdict)
    assert len(fake_llm.requests) == 1
    (line,) = call_log(tmp_path)
    assert line["outcome"] == "error"
    assert str(status) in line["error"]


async def test_permanent_error_after_transient_stops(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(status=503), Reply(status=401, content="bad key"), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm, **{"gateway.max_attempts": 4}) as gateway:
        with pytest.raises(LLMUnavailableError, match="bad key"):
            await gateway.structured("scorer", MESSAGES, Verdict)
    assert len(fake_llm.requests) == 2


# --- timeouts -------------------------------------------------------------------------------


async def _drain(fake: FakeLLM) -> None:
    """Wait until the fake has finished every delayed reply of earlier requests."""
    deadline = time.monotonic() + 60  # generous: a deadline, not a measurement
    while fake.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert fake.in_flight == 0


@pytest.mark.parametrize("reply", [Reply(hang=True), Reply(content=GOOD, delay_s=0.7)])
async def test_timeout_is_transient(tmp_path: Path, fake_llm: FakeLLM, reply: Reply) -> None:
    fake_llm.push(reply, Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm, **{"agents.default.timeout": 0.3}) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
    assert len(fake_llm.requests) == 2
    first, second = call_log(tmp_path)
    assert first["outcome"] == "transient_error" and "Timeout" in first["error"]
    assert second["outcome"] == "ok"
    await _drain(fake_llm)


async def test_timeouts_exhaust_budget(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(hang=True), Reply(hang=True), Reply(content=GOOD))
    overrides = {"agents.default.timeout": 0.2, "gateway.max_attempts": 2}
    async with open_gateway(tmp_path, fake_llm, **overrides) as gateway:
        with pytest.raises(LLMUnavailableError, match="2 attempts failed"):
            # two 0.2 s timeouts, not a hang: a deadline, not a measurement
            await asyncio.wait_for(gateway.structured("scorer", MESSAGES, Verdict), 60)
    assert len(fake_llm.requests) == 2


async def test_agent_timeout_override(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # The default timeout (2 s) would wait out the delay; the scorer's 0.2 s does not.
    fake_llm.push(Reply(content=GOOD, delay_s=0.5), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm, **{"agents.scorer.timeout": 0.2}) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
    assert len(fake_llm.requests) == 2
    await _drain(fake_llm)


# --- concurrency limits ---------------------------------------------------------------------


async def _burst(gateway: LLMGateway, agents: list[str]) -> None:
    results = await asyncio.gather(
        *(gateway.structured(agent, MESSAGES, Verdict) for agent in agents)
    )
    assert results == [EXPECTED] * len(agents)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"concurrency.total": 2}, 2),
        ({"concurrency.scorer": 3}, 3),
        # another agent's limit does not apply
        ({"concurrency.analyzer": 1, "client.default.max_concurrency": 0}, 8),
        ({"client.default.max_concurrency": 0}, 8),
        ({}, 4),  # an endpoint on this machine: 4 requests at a time by default
        ({"client.default.max_concurrency": 6}, 6),
        # the other agents on this endpoint keep its default: the endpoint's limit holds
        ({"client.scorer.max_concurrency": 0}, 4),
    ],
)
async def test_concurrency_limits(
    tmp_path: Path, fake_llm: FakeLLM, limits: dict[str, int], expected: int
) -> None:
    await _drain(fake_llm)
    fake_llm.push(*[Reply(content=GOOD, delay_s=0.2)] * 8)
    async with open_gateway(tmp_path, fake_llm, **limits) as gateway:
        await _burst(gateway, ["scorer"] * 8)
    assert len(fake_llm.requests) == 8
    assert fake_llm.max_in_flight == expected


async def test_per_agent_limit_leaves_others_free(tmp_path: Path, fake_llm: FakeLLM) -> None:
    await _drain(fake_llm)
    fake_llm.push(*[Reply(content=GOOD, delay_s=0.15)] * 8)
    limits = {"concurrency.scorer": 1, "client.default.max_concurrency": 0}
    async with open_gateway(tmp_path, fake_llm, **limits) as gateway:
        await _burst(gateway, ["scorer"] * 4 + ["analyzer"] * 4)
    assert fake_llm.max_in_flight == 5  # one scorer call plus every analyzer call


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"client.default.max_concurrency": 2}, 2),
        # agents on one endpoint share its limit: the smallest any of them sets
        ({"client.default.max_concurrency": 3, "client.analyzer.max_concurrency": 1}, 1),
    ],
)
async def test_agents_on_one_endpoint_share_its_limit(
    tmp_path: Path, fake_llm: FakeLLM, limits: dict[str, int], expected: int
) -> None:
    await _drain(fake_llm)
    fake_llm.push(*[Reply(content=GOOD, delay_s=0.15)] * 8)
    async with open_gateway(tmp_path, fake_llm, **limits) as gateway:
        await _burst(gateway, ["scorer"] * 4 + ["analyzer"] * 4)
    assert len(fake_llm.requests) == 8
    assert fake_llm.max_in_flight == expected


async def test_waiting_calls_do_not_hold_total_slots(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # Scorer calls queued behind their own limit must not take the total's slots from
    # other agents: with total 2 and scorer 1, the analyzer call runs beside the first
    # scorer call instead of waiting for the scorer queue. Checked on the order in which
    # requests reach the server, not on timings.
    await _drain(fake_llm)
    fake_llm.push(*[Reply(content=GOOD, delay_s=0.2)] * 4)
    limits = {
        "concurrency.total": 2,
        "concurrency.scorer": 1,
        "agents.analyzer.model": "analyzer-model",
    }
    async with open_gateway(tmp_path, fake_llm, **limits) as gateway:
        # Tasks start in creation order: the scorer calls queue up first.
        scorers = [
            asyncio.create_task(gateway.structured("scorer", MESSAGES, Verdict)) for _ in range(3)
        ]
        analyzer = asyncio.create_task(gateway.structured("analyzer", MESSAGES, Verdict))
        results = [await task for task in scorers]
        assert await analyzer == EXPECTED
    assert results == [EXPECTED] * 3
    assert fake_llm.max_in_flight == 2
    order = [r["model"] for r in fake_llm.requests]
    # the analyzer went out with the first scorer call, before the queued scorer calls
    assert order.index("analyzer-model") <= 1
    assert order.count("analyzer-model") == 1


async def test_retries_respect_concurrency_limit(tmp_path: Path, fake_llm: FakeLLM) -> None:
    await _drain(fake_llm)
    fake_llm.push(*[Reply(status=503, delay_s=0.1)] * 4, *[Reply(content=GOOD, delay_s=0.1)] * 4)
    async with open_gateway(tmp_path, fake_llm, **{"concurrency.total": 2}) as gateway:
        await _burst(gateway, ["scorer"] * 4)
    assert len(fake_llm.requests) == 8
    assert fake_llm.max_in_flight == 2
