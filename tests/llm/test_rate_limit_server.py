"""amaris against a judge that enforces its rate limits (``amaris.sim.rate_limit``, the one
``amaris offline-llm --requests-per-minute/--tokens-per-minute`` serves), over real HTTP
through the real gateway: with the limits configured it draws no 429; with none, it reads
them from the headers of the first answers and draws none after."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from amaris.cli.entry import main
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway
from amaris.llm.providers import build_providers
from amaris.sim.judge_server import Reply, create_llm_app
from amaris.sim.rate_limit import EnforcedLimits, RateLimit, limited_responder
from amaris.sim.wire import ChatRequest
from tests.support.fake_llm import serve_in_thread
from tests.support.scripted_llm import GOOD, MESSAGES, MODEL
from tests.support.settings import make_settings


class Answer(BaseModel):
    value: int
    reason: str


async def good(body: ChatRequest) -> Reply:
    return Reply(content=GOOD)


@contextmanager
def limited_judge(limit: RateLimit) -> Iterator[tuple[str, EnforcedLimits]]:
    enforced = EnforcedLimits(limit)
    with serve_in_thread(create_llm_app(limited_responder(good, enforced))) as url:
        yield f"{url}/v1", enforced


def gateway(tmp_path: Path, url: str, **overrides: Any) -> LLMGateway:
    settings = make_settings(
        tmp_path,
        **{
            "client.default.base_url": url,
            "client.default.api_key": "test-key",
            "client.default.max_concurrency": 0,
            "agents.default.model": MODEL,
            "gateway.backoff_base_seconds": 0.01,
            "gateway.backoff_max_seconds": 0.2,
            **overrides,
        },
    )
    return LLMGateway(settings, build_providers(settings), CallLog(None))


async def batch(llm: LLMGateway, calls: int) -> float:
    started = time.monotonic()
    replies = await asyncio.gather(
        *(llm.structured("scorer", MESSAGES, Answer) for _ in range(calls))
    )
    assert [r.value for r in replies] == [7] * calls
    return time.monotonic() - started


async def test_with_the_limits_configured_no_request_is_refused(tmp_path: Path) -> None:
    # The judge allows 1200 requests and 36,000 tokens a minute, 2 s of each at once; its
    # answers count about 20 tokens, amaris estimates each at its prompt plus max_tokens.
    limit = RateLimit(requests_per_minute=1200, tokens_per_minute=36_000, burst_seconds=2.0)
    with limited_judge(limit) as (url, judge):
        overrides = {
            "client.default.requests_per_minute": 1200,
            "client.default.tokens_per_minute": 36_000,
            "agents.default.max_tokens": 64,
        }
        llm = gateway(tmp_path, url, **overrides)
        try:
            elapsed = await batch(llm, 60)
        finally:
            await llm.close()
    assert judge.refused == 0 and judge.admitted == 60
    assert elapsed >= 1.9  # 20 at once, 40 at 20 a second
    waited = llm.rate_limits.waited()
    assert sum(waited.values()) > 0 and {kind for _, kind in waited} <= {"requests", "tokens"}


async def test_unlimited_it_adopts_the_limits_the_headers_state(tmp_path: Path) -> None:
    limit = RateLimit(requests_per_minute=1200, burst_seconds=2.0)
    with limited_judge(limit) as (url, judge):
        llm = gateway(tmp_path, url)
        try:
            await batch(llm, 60)  # 40 at once pass, the rest are refused and retried
            first = judge.refused
            assert llm.rate_limits.gate(url, MODEL).limits() == {"requests": 1200}
            await asyncio.sleep(2.1)  # the judge's bucket fills again
            await batch(llm, 60)
        finally:
            await llm.close()
    assert first > 0
    assert judge.refused == first  # none refused once the limit was known
    assert judge.admitted == 120


def test_the_judge_answers_with_its_limits_and_refuses_past_them() -> None:
    clock = [0.0]
    judge = EnforcedLimits(RateLimit(60, 600, burst_seconds=2.0), clock=lambda: clock[0])
    admitted, headers = judge.admit(100)
    assert admitted
    assert headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "1",
        "x-ratelimit-reset-requests": "1.000s",
        "x-ratelimit-limit-tokens": "600",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "10.000s",
    }
    # a request is left; 100 tokens were taken of 20, 5 more come in 8.5 s
    admitted, headers = judge.admit(5)
    assert not admitted
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("9", "8500")
    clock[0] = 8.4
    assert not judge.admit(5)[0]
    clock[0] = 8.51
    assert judge.admit(5)[0]
    assert (judge.admitted, judge.refused) == (2, 2)


def test_offline_llm_refuses_a_limit_that_is_not_above_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["offline-llm", "--requests-per-minute", "0"]) == 2
    assert main(["offline-llm", "--rate-burst-seconds", "-1"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "--requests-per-minute must be above 0",
        "--rate-burst-seconds must be above 0",
    ]
