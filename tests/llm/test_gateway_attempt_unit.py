"""The gateway's one retry layer (amaris/llm/attempt.py) through the real :class:`LLMGateway`,
the endpoint faked at the gateway seam (tests/support/scripted_llm.py); no conftest fixture,
so its mutation run (``bench/evaluations/mutation.py attempt``) stays cheap per mutant.

What a user sees: which errors are asked again and how often, what is raised, the call log's
lines, the ledger's counts, the structured-output fallback, the waits between attempts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from amaris.llm.budget import estimate_messages
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import (
    LLMContextOverflowError,
    LLMGateway,
    LLMResponseTooLargeError,
    LLMTransientError,
    LLMUnavailableError,
)
from amaris.llm.ledger import Usage
from amaris.llm.output_fit import fit_schema
from amaris.llm.schema import strict_schema
from amaris.llm.transport import ResponseTooLargeError
from amaris.request_context import request_id_var
from tests.support.scripted_llm import (
    GOOD,
    MESSAGES,
    MODEL,
    ScriptedProvider,
    answer,
    settings,
    status,
    timeout,
    use_clock,
)


class Reply(BaseModel):
    value: int
    reason: str = Field(max_length=5000)


REFUSED = "response_format json_schema is not supported by this model"


def open_gateway(tmp_path: Path, endpoint: ScriptedProvider, **overrides: Any) -> LLMGateway:
    return LLMGateway(settings(**overrides), {"scorer": endpoint}, CallLog(tmp_path / "logs"))


async def lines(tmp_path: Path, gateway: LLMGateway) -> list[dict[str, Any]]:
    """The call log's records, after closing ``gateway`` (which flushes it)."""
    await gateway.close()
    path = tmp_path / "logs" / "llm_calls.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def usage(gateway: LLMGateway, agent: str = "scorer", model: str = MODEL) -> Usage:
    return gateway.ledger.totals()[(agent, model)]


async def test_transient_errors_are_asked_again_and_every_attempt_is_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = use_clock(monkeypatch)
    endpoint = ScriptedProvider([status(503, "overloaded"), timeout(), answer()], clock=clock)
    seen: list[tuple[str, float]] = []
    gateway = LLMGateway(
        settings(),
        {"scorer": endpoint},
        CallLog(tmp_path / "logs"),
        observer=lambda agent, seconds: seen.append((agent, seconds)),
    )
    token = request_id_var.set("req-1")
    try:
        result = await gateway.structured("scorer", MESSAGES, Reply, step=4)
    finally:
        request_id_var.reset(token)
    assert result == Reply(value=7, reason="ok")
    assert len(endpoint.calls) == 3
    assert gateway.stats["scorer.errors"] == 2 and gateway.stats["scorer.calls"] == 1
    spent = usage(gateway)
    assert (spent.calls, spent.failed, spent.timed_out) == (1, 2, 1)
    assert spent.seconds == pytest.approx(3 * 0.123456)
    assert gateway.ledger.for_step(4)[("scorer", MODEL)].failed == 2
    (observed,) = seen  # answered requests only
    assert observed[0] == "scorer" and observed[1] == pytest.approx(0.123456)
    first, second, third = await lines(tmp_path, gateway)
    for record in (first, second):  # a jittered wait under backoff_max_seconds
        assert 0 <= record.pop("retry_in_s") <= 0.001
    common = {
        "time": 1_800_000_000.0,
        "agent": "scorer",
        "model": MODEL,
        "backend": endpoint.description,
        "step": 4,
        "request_id": "req-1",
        "reask": False,
        "structured_output": "json_schema",
        "latency_ms": 123.46,
    }
    assert first == {
        **common,
        "attempt": 1,
        "outcome": "transient_error",
        "error": "APIStatusError: overloaded",
    }
    assert second == {
        **common,
        "attempt": 2,
        "outcome": "transient_error",
        "error": "APITimeoutError: Request timed out.",
    }
    assert third == {
        **common,
        "attempt": 3,
        "outcome": "ok",
        "finish_reason": None,
        "prompt_tokens": None,
        "completion_tokens": None,
        "reasoning_tokens": None,
        "cached_tokens": None,
    }


@pytest.mark.parametrize("max_attempts", [1, 3])
async def test_transient_errors_past_the_budget_raise_a_transient_error(
    tmp_path: Path, max_attempts: int
) -> None:
    errors = [status(502, f"bad gateway {i}") for i in range(max_attempts)]
    endpoint = ScriptedProvider([*errors, answer()])
    gateway = open_gateway(tmp_path, endpoint, **{"gateway.max_attempts": max_attempts})
    with pytest.raises(LLMTransientError) as raised:
        await gateway.structured("scorer", MESSAGES, Reply)
    last = f"bad gateway {max_attempts - 1}"
    assert str(raised.value) == f"scorer: {max_attempts} attempts failed; last: {last}"
    assert raised.value.__cause__ is errors[-1]
    assert len(endpoint.calls) == max_attempts
    records = await lines(tmp_path, gateway)
    assert [r["attempt"] for r in records] == list(range(1, max_attempts + 1))
    # a wait before each next attempt, none after the last
    assert ["retry_in_s" in r for r in records] == [True] * (max_attempts - 1) + [False]
    assert usage(gateway).failed == max_attempts and gateway.stats["scorer.errors"] == max_attempts


@pytest.mark.parametrize("code", [400, 401, 404, 501])
async def test_a_permanent_error_is_not_asked_again(tmp_path: Path, code: int) -> None:
    endpoint = ScriptedProvider([status(503, "busy"), status(code, "refused"), answer()])
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMUnavailableError) as raised:
        await gateway.structured("scorer", MESSAGES, Reply)
    assert type(raised.value) is LLMUnavailableError  # not transient: not worth a later try
    assert str(raised.value) == "scorer: refused"
    assert len(endpoint.calls) == 2
    records = await lines(tmp_path, gateway)
    assert [r["outcome"] for r in records] == ["transient_error", "error"]
    assert "retry_in_s" not in records[1]
    assert records[1]["error"] == "APIStatusError: refused"
    assert gateway.stats["scorer.errors"] == 2 and "scorer.calls" not in gateway.stats


async def test_a_context_overflow_is_final_and_teaches_the_window(tmp_path: Path) -> None:
    overflow = "maximum context length is 4096 tokens; your messages resulted in 5000 tokens"
    endpoint = ScriptedProvider([status(400, overflow), answer()])
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMContextOverflowError, match=r"^scorer: maximum context length"):
        await gateway.structured("scorer", MESSAGES, Reply)
    assert len(endpoint.calls) == 1
    expected = estimate_messages(MESSAGES) / 5000
    assert gateway.context_windows.scale(endpoint.description, MODEL) == expected
    (record,) = await lines(tmp_path, gateway)
    assert record["outcome"] == "context_overflow" and "retry_in_s" not in record
    assert gateway.stats["scorer.errors"] == 1 and usage(gateway).failed == 1


async def test_an_overflow_that_states_no_count_teaches_nothing(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([status(400, "the prompt is too long for the context window")])
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMContextOverflowError):
        await gateway.structured("scorer", MESSAGES, Reply)
    assert gateway.context_windows.scale(endpoint.description, MODEL) == 1.0
    await gateway.close()


async def test_an_oversized_answer_is_not_asked_again(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([ResponseTooLargeError(9000, 100, declared=True), answer()])
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMResponseTooLargeError) as raised:
        await gateway.structured("scorer", MESSAGES, Reply)
    assert str(raised.value) == (
        "scorer: the response declares 9000 bytes; the limit is 100 "
        "(agents.scorer.max_response_bytes)"
    )
    assert len(endpoint.calls) == 1
    assert gateway.stats["scorer.oversize"] == 1 and "scorer.errors" not in gateway.stats
    assert usage(gateway).failed == 1
    (record,) = await lines(tmp_path, gateway)
    assert record["outcome"] == "oversize"
    assert record["error"] == "the response declares 9000 bytes; the limit is 100"


async def test_a_retry_after_hint_is_the_wait(tmp_path: Path) -> None:
    limited = status(429, "slow down", headers={"retry-after": "0.01234"})
    endpoint = ScriptedProvider([limited, answer()])
    gateway = open_gateway(tmp_path, endpoint, **{"gateway.backoff_max_seconds": 0.05})
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    assert [r.get("retry_in_s") for r in await lines(tmp_path, gateway)] == [0.012, None]


async def test_the_wait_without_a_hint_is_jittered_under_a_doubling_ceiling(
    tmp_path: Path,
) -> None:
    # base 0.02 s doubling per attempt (0.02, 0.04, 0.08), under backoff_max_seconds 1
    overrides = {
        "gateway.max_attempts": 4,
        "gateway.backoff_base_seconds": 0.02,
        "gateway.backoff_max_seconds": 1.0,
    }
    endpoint = ScriptedProvider([status(503), status(503), status(503), answer()])
    gateway = open_gateway(tmp_path, endpoint, **overrides)
    random.seed(2026)
    replay = random.Random(2026)
    expected = [round(replay.uniform(0, ceiling), 3) for ceiling in (0.02, 0.04, 0.08)]
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    waits = [r.get("retry_in_s") for r in await lines(tmp_path, gateway)]
    assert waits == [*expected, None]


async def test_refused_output_formats_fall_back_without_spending_attempts(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([status(400, REFUSED), status(400, REFUSED), answer()])
    gateway = open_gateway(tmp_path, endpoint, **{"gateway.max_attempts": 1})
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    schema = strict_schema(Reply)
    assert [r.response_format for r in endpoint.calls] == [
        {"type": "json_schema", "json_schema": {"name": "Reply", "strict": True, "schema": schema}},
        {"type": "json_object"},
        None,
    ]
    assert gateway.output_mode("scorer").mode == "none"
    assert gateway.stats["scorer.format_fallbacks"] == 2 and "scorer.errors" not in gateway.stats
    assert usage(gateway).failed == 2
    records = await lines(tmp_path, gateway)
    assert [(r["attempt"], r["structured_output"], r["outcome"]) for r in records] == [
        (1, "json_schema", "format_refused"),
        (1, "json_object", "format_refused"),
        (1, "none", "ok"),
    ]
    assert records[0]["error"] == REFUSED


async def test_a_refusal_with_no_mode_left_is_an_error(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([status(400, REFUSED)] * 3 + [answer()])
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMUnavailableError, match=REFUSED):
        await gateway.structured("scorer", MESSAGES, Reply)
    assert len(endpoint.calls) == 3
    await gateway.close()


async def test_a_transient_error_keeps_the_output_format(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([status(503, "json_schema worker busy"), answer()])
    gateway = open_gateway(tmp_path, endpoint)
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    assert [r.response_format["type"] for r in endpoint.calls if r.response_format] == [
        "json_schema",
        "json_schema",
    ]
    assert gateway.output_mode("scorer").mode == "json_schema"
    assert "scorer.format_fallbacks" not in gateway.stats
    await gateway.close()


@pytest.mark.parametrize(
    ("overrides", "sent"),
    [
        ({"agents.scorer.structured_output": "json_schema"}, "json_schema"),
        ({"agents.scorer.response_format": {"type": "json_object", "x": 1}}, "json_object"),
    ],
)
async def test_a_configured_format_that_is_refused_is_an_error(
    tmp_path: Path, overrides: dict[str, Any], sent: str
) -> None:
    endpoint = ScriptedProvider([status(400, REFUSED), answer()])
    gateway = open_gateway(tmp_path, endpoint, **overrides)
    with pytest.raises(LLMUnavailableError, match=REFUSED):
        await gateway.structured("scorer", MESSAGES, Reply)
    assert len(endpoint.calls) == 1
    (request,) = endpoint.calls
    assert request.response_format is not None and request.response_format["type"] == sent
    assert "scorer.format_fallbacks" not in gateway.stats
    await gateway.close()


async def test_configured_formats_are_sent_as_configured(tmp_path: Path) -> None:
    configured = {"type": "json_object", "x": 1}
    endpoint = ScriptedProvider([answer(), answer()])
    gateway = LLMGateway(
        settings(
            **{
                "agents.scorer.response_format": configured,
                "agents.analyzer.structured_output": "json_object",
            }
        ),
        {"scorer": endpoint, "analyzer": endpoint},
        CallLog(tmp_path / "logs"),
    )
    await gateway.structured("scorer", MESSAGES, Reply)
    await gateway.structured("analyzer", MESSAGES, Reply)
    assert [r.response_format for r in endpoint.calls] == [configured, {"type": "json_object"}]
    assert gateway.output_mode("scorer").mode == "configured"
    assert gateway.output_mode("analyzer") == (
        gateway.output_mode("analyzer").__class__(
            "json_object", "configured (structured_output: json_object)"
        )
    )
    records = await lines(tmp_path, gateway)
    assert [r["structured_output"] for r in records] == ["configured", "json_object"]


async def test_max_tokens_fits_the_schema_it_asks_for(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([answer(), answer()])
    gateway = LLMGateway(
        settings(
            **{
                "agents.scorer.max_tokens": 50,
                "agents.analyzer.max_tokens": 50,
                "agents.analyzer.structured_output": "json_object",
            }
        ),
        {"scorer": endpoint, "analyzer": endpoint},
        CallLog(None),
    )
    await gateway.structured("scorer", MESSAGES, Reply)
    await gateway.structured("analyzer", MESSAGES, Reply)
    fitted, _ = fit_schema(strict_schema(Reply), 50)
    assert fitted != strict_schema(Reply)
    first, second = (r.response_format for r in endpoint.calls)
    assert first is not None and first["json_schema"]["schema"] == fitted
    assert second == {"type": "json_object"}
    await gateway.close()


async def test_without_max_tokens_the_schema_is_sent_whole(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([answer()])
    gateway = open_gateway(tmp_path, endpoint)
    await gateway.structured("scorer", MESSAGES, Reply)
    (request,) = endpoint.calls
    assert request.response_format is not None
    assert request.response_format["json_schema"]["schema"] == strict_schema(Reply)
    await gateway.close()


async def test_the_offline_judge_gets_no_format_and_its_own_model_label(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([answer()], offline=True)
    gateway = open_gateway(tmp_path, endpoint)
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    assert endpoint.calls[0].response_format is None
    assert gateway.output_mode("scorer").mode == "none"
    assert usage(gateway, model="offline").calls == 1
    (record,) = await lines(tmp_path, gateway)
    assert record["structured_output"] == "none" and record["model"] == MODEL


async def test_an_account_gets_the_usage_and_is_logged(tmp_path: Path) -> None:
    endpoint = ScriptedProvider(
        [status(503), answer(prompt_tokens=5, completion_tokens=2), answer()]
    )
    gateway = open_gateway(tmp_path, endpoint)
    await gateway.structured_completion("scorer", MESSAGES, Reply, account="canary", step=1)
    await gateway.structured("scorer", MESSAGES, Reply)
    totals = gateway.ledger.totals()
    canary = totals[("canary", MODEL)]
    assert (canary.calls, canary.failed, canary.prompt_tokens, canary.completion_tokens) == (
        1,
        1,
        5,
        2,
    )
    assert totals[("scorer", MODEL)].calls == 1
    records = await lines(tmp_path, gateway)
    assert [r.get("account") for r in records] == ["canary", "canary", None]
    assert list(records[0])[:3] == ["time", "agent", "account"]


async def test_an_answer_is_logged_with_its_usage_and_reasoning(tmp_path: Path) -> None:
    reply = answer(
        prompt_tokens=600,
        completion_tokens=40,
        reasoning="r" * 5000,
        finish_reason="stop",
        reasoning_tokens=30,
        cached_tokens=100,
    )
    endpoint = ScriptedProvider([reply, answer("<think>a draft</think>" + GOOD)])
    gateway = open_gateway(tmp_path, endpoint)
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    spent = usage(gateway)
    assert (spent.prompt_tokens, spent.completion_tokens) == (600, 40)
    assert (spent.reasoning_tokens, spent.cached_tokens) == (30, 100)
    # the endpoint counted 600 tokens for the estimate of MESSAGES: budgets scale down
    scale = gateway.context_windows.scale(endpoint.description, MODEL)
    assert scale == estimate_messages(MESSAGES) / 600
    first, second = await lines(tmp_path, gateway)
    assert (first["prompt_tokens"], first["completion_tokens"]) == (600, 40)
    assert (first["reasoning_tokens"], first["cached_tokens"]) == (30, 100)
    assert first["finish_reason"] == "stop"
    assert first["reasoning_chars"] == 5000 and first["reasoning"] == "r" * 4000
    assert second["reasoning"] == "a draft" and second["reasoning_chars"] == 7


async def test_an_answer_without_reasoning_or_prompt_count_logs_and_learns_none(
    tmp_path: Path,
) -> None:
    endpoint = ScriptedProvider([answer(completion_tokens=3)])
    gateway = open_gateway(tmp_path, endpoint)
    await gateway.structured("scorer", MESSAGES, Reply)
    assert gateway.context_windows.scale(endpoint.description, MODEL) == 1.0
    (record,) = await lines(tmp_path, gateway)
    assert "reasoning" not in record and "reasoning_chars" not in record


async def test_failed_attempts_are_timed_in_the_ledger_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = use_clock(monkeypatch)
    endpoint = ScriptedProvider([status(404, "gone")], clock=clock, seconds=0.5)
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMUnavailableError):
        await gateway.structured("scorer", MESSAGES, Reply)
    assert usage(gateway).seconds == 0.5
    (record,) = await lines(tmp_path, gateway)
    assert record["latency_ms"] == 500.0
