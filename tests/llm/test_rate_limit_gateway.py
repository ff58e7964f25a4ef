"""The endpoints' rate limits and prices through the real :class:`LLMGateway`, the endpoint
faked at the gateway seam (tests/support/scripted_llm.py): calls over
``client.<agent>.requests_per_minute`` / ``tokens_per_minute`` wait their turn (outside
the attempt's timeout, counted, logged), a 429's ``retry-after`` holds the others, the
endpoint's headers set a limit none was configured for; each call is priced at its
agent's ``agents.<agent>.price`` (else ``pricing.<model>``)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from amaris.llm import limits
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway
from amaris.llm.ledger import cost
from amaris.llm.providers import Completion
from amaris.llm.rate_headers import RateHeaders
from tests.support.scripted_llm import (
    GOOD,
    MESSAGES,
    MODEL,
    ScriptedProvider,
    answer,
    settings,
    status,
)


class Reply(BaseModel):
    value: int
    reason: str


def open_gateway(
    tmp_path: Path,
    endpoint: ScriptedProvider,
    overrides: dict[str, Any] | None = None,
    pipeline: bool = False,
) -> LLMGateway:
    return LLMGateway(
        settings(**(overrides or {})),
        {"scorer": endpoint, "analyzer": endpoint},
        CallLog(tmp_path / "logs"),
        step_wall_time=pipeline,
    )


async def lines(tmp_path: Path, gateway: LLMGateway) -> list[dict[str, Any]]:
    await gateway.close()
    path = tmp_path / "logs" / "llm_calls.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def timed(gateway: LLMGateway, calls: int, agent: str = "scorer") -> float:
    started = time.monotonic()
    replies = await asyncio.gather(
        *(gateway.structured(agent, MESSAGES, Reply) for _ in range(calls))
    )
    assert [r.value for r in replies] == [7] * calls
    return time.monotonic() - started


async def test_calls_over_the_request_limit_wait_their_turn_and_say_so(tmp_path: Path) -> None:
    endpoint = ScriptedProvider(default=answer())
    gateway = open_gateway(tmp_path, endpoint, {"client.default.requests_per_minute": 1200})
    # 20 a second, 20 at once: the 10 beyond wait 0.05 s to 0.5 s
    assert await timed(gateway, 30) >= 0.45
    waited = gateway.rate_limits.waited()
    assert set(waited) == {("scorer", "requests")} and waited["scorer", "requests"] > 2.0
    assert gateway.rate_limits.waiting() == {"scorer": 0}
    noted = [
        r["rate_limit_wait_s"] for r in await lines(tmp_path, gateway) if "rate_limit_wait_s" in r
    ]
    assert len(noted) == 10 and max(noted) >= 0.4


async def test_agents_on_one_endpoint_and_model_share_the_least_limit(tmp_path: Path) -> None:
    endpoint = ScriptedProvider(default=answer())
    overrides = {
        "client.scorer.requests_per_minute": 1200,
        "client.analyzer.requests_per_minute": 6000,
    }
    gateway = open_gateway(tmp_path, endpoint, overrides)
    started = time.monotonic()
    await asyncio.gather(timed(gateway, 15), timed(gateway, 15, "analyzer"))
    assert time.monotonic() - started >= 0.45  # 30 at the scorer's 20 a second
    assert {agent for agent, _ in gateway.rate_limits.waited()} <= {"scorer", "analyzer"}


async def test_a_rate_wait_does_not_count_against_the_attempts_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(limits, "TIMEOUT_GRACE_SECONDS", 0.0)
    endpoint = ScriptedProvider(default=answer())
    overrides = {"client.default.requests_per_minute": 60, "agents.default.timeout": 0.3}
    gateway = open_gateway(tmp_path, endpoint, overrides, pipeline=True)
    caplog.set_level(logging.INFO, logger="amaris.llm")
    started = time.monotonic()
    replies = await asyncio.gather(
        *(gateway.structured("analyzer", MESSAGES, Reply, step=3) for _ in range(2))
    )
    # the second waited a second for its turn, past its 0.3 s timeout, and was answered
    assert [r.value for r in replies] == [7, 7] and time.monotonic() - started >= 0.95
    assert len(endpoint.calls) == 2
    # the step pipeline's gateway logs a wait of a second or more (the step's run logs)
    logged = [r.getMessage() for r in caplog.records if "for the rate limit" in r.getMessage()]
    assert len(logged) == 1, logged
    head, _, tail = logged[0].partition(" s for the rate limit of ")
    assert head.startswith("analyzer waited 1.") or head == "analyzer waited 0.9", head
    assert tail == f"http://127.0.0.1:9/v1 ({MODEL}, requests) (step 3)"


async def test_the_scoring_gateway_logs_its_waits_at_debug_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = ScriptedProvider(default=answer())
    gateway = open_gateway(tmp_path, endpoint, {"client.default.requests_per_minute": 60})
    caplog.set_level(logging.INFO, logger="amaris.llm")
    await timed(gateway, 2)
    assert not [r for r in caplog.records if "for the rate limit" in r.getMessage()]


async def test_a_429s_retry_after_holds_every_call_to_the_endpoint(tmp_path: Path) -> None:
    limited = status(429, "slow down", headers={"retry-after-ms": "400"})
    endpoint = ScriptedProvider([limited], default=answer())
    gateway = open_gateway(tmp_path, endpoint, {"gateway.backoff_max_seconds": 1.0})
    first = asyncio.ensure_future(gateway.structured("scorer", MESSAGES, Reply))
    await endpoint.arrived.wait()  # its 429 is read: the endpoint's gate holds
    started = time.monotonic()
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    assert time.monotonic() - started >= 0.35
    assert (await first).value == 7
    waited = gateway.rate_limits.waited()
    assert waited["scorer", "endpoint"] >= 0.35
    records = await lines(tmp_path, gateway)
    assert records[0]["outcome"] == "transient_error" and records[0]["retry_in_s"] == 0.4


async def test_tokens_wait_for_the_estimate_and_settle_with_the_usage(tmp_path: Path) -> None:
    # 100 tokens a second, 100 at once; each call is estimated at its prompt plus its
    # 100 max_tokens, more than the bucket: it goes when the bucket is full.
    overrides = {"client.default.tokens_per_minute": 6000, "agents.default.max_tokens": 100}
    small = Completion(content=GOOD, prompt_tokens=5, completion_tokens=5)
    endpoint = ScriptedProvider(default=small)
    gateway = open_gateway(tmp_path, endpoint, overrides)
    # settled to its 10 tokens, the first leaves room for the second at once, nearly
    assert await timed(gateway, 2) < 0.5
    unreported = ScriptedProvider(default=answer())  # no usage: the estimate stands
    gateway = open_gateway(tmp_path, unreported, overrides)
    assert await timed(gateway, 2) >= 1.0
    assert set(gateway.rate_limits.waited()) == {("scorer", "tokens")}


async def test_the_endpoints_headers_set_a_limit_none_was_configured_for(tmp_path: Path) -> None:
    said = RateHeaders(limit_requests=600, remaining_requests=0, reset_requests=60.0)
    endpoint = ScriptedProvider([Completion(content=GOOD, rate_limit=said)], default=answer())
    gateway = open_gateway(tmp_path, endpoint)
    await timed(gateway, 1)
    gate = gateway.rate_limits.gate(endpoint.description, MODEL)
    assert gate.limits() == {"requests": 600}
    # nothing remained: the next waits for the bucket's refill (10 a second), not the reset
    started = time.monotonic()
    await timed(gateway, 1)
    assert 0.08 <= time.monotonic() - started < 1.0


async def test_each_call_is_priced_at_its_agents_price(tmp_path: Path) -> None:
    reply = Completion(content=GOOD, prompt_tokens=1000, completion_tokens=100, cached_tokens=400)
    endpoint = ScriptedProvider(default=reply)
    overrides = {
        "agents.scorer.price": {
            "input_per_mtok": 2.0,
            "cached_input_per_mtok": 0.5,
            "output_per_mtok": 8.0,
        },
        "pricing": {MODEL: {"prompt": 1.0, "completion": 1.0}},
    }
    gateway = open_gateway(tmp_path, endpoint, overrides)
    await gateway.structured("scorer", MESSAGES, Reply)
    # the rubric canary's scorer calls, counted under their own name at the scorer's price
    await gateway.structured_completion("scorer", MESSAGES, Reply, account="canary")
    await gateway.structured("analyzer", MESSAGES, Reply)  # no price of its own: the model's
    table = gateway.ledger.totals()
    scorer = (600 * 2.0 + 400 * 0.5 + 100 * 8.0) / 1e6
    assert table["scorer", MODEL].cost_usd == pytest.approx(scorer)
    assert table["canary", MODEL].cost_usd == pytest.approx(scorer)
    assert table["analyzer", MODEL].cost_usd == pytest.approx(1100 / 1e6)
    assert cost(table) == pytest.approx(2 * scorer + 1100 / 1e6)


async def test_a_call_with_tokens_and_no_price_makes_the_cost_unknown(tmp_path: Path) -> None:
    reply = Completion(content=GOOD, prompt_tokens=1000, completion_tokens=100)
    endpoint = ScriptedProvider(default=reply)
    price = {"input_per_mtok": 1.0, "output_per_mtok": 1.0}
    gateway = open_gateway(tmp_path, endpoint, {"agents.scorer.price": price})
    await gateway.structured("scorer", MESSAGES, Reply)
    assert cost(gateway.ledger.totals()) == pytest.approx(1100 / 1e6)
    await gateway.structured("analyzer", MESSAGES, Reply)
    assert cost(gateway.ledger.totals()) is None
    unpriced = open_gateway(tmp_path, ScriptedProvider(default=reply))
    await unpriced.structured("scorer", MESSAGES, Reply)
    assert cost(unpriced.ledger.totals()) is None  # no price anywhere: none shown
