"""LLMGateway through real HTTP: request contents, the call log, providers, parsing helpers.

Retries, timeouts and concurrency limits are in ``test_gateway_retries.py``; JSON
repair and the corrective re-ask in ``test_gateway_output.py``. All three use the
helpers of ``tests/support/gateway.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from amaris.llm.call_log import CallLog
from amaris.llm.gateway import (
    LLMGateway,
    LLMUnavailableError,
    build_providers,
    is_transient,
    parse_json_object,
)
from amaris.llm.providers import OfflineProvider, OpenAIProvider
from amaris.request_context import request_id_var
from amaris.settings import AGENTS
from amaris.sim.judge_server import Reply
from tests.support.fake_llm import FakeLLM
from tests.support.gateway import EXPECTED, GOOD, MESSAGES, Verdict, call_log, open_gateway
from tests.support.settings import llm_settings, make_settings

# --- success and request contents ---------------------------------------------------------


async def test_success_first_try_sends_configured_request(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.push(Reply(content=GOOD))
    overrides = {
        "agents.default.model": "judge-mini",
        "agents.default.temperature": 0.0,
        "agents.default.response_format": {"type": "json_object"},
    }
    messages = [dict(m) for m in MESSAGES]
    async with open_gateway(tmp_path, fake_llm, **overrides) as gateway:
        result = await gateway.structured("scorer", messages, Verdict, step=3)
        stats = gateway.stats.copy()
        usage = gateway.ledger.for_step(3)

    assert result == EXPECTED
    assert len(fake_llm.requests) == 1
    body = fake_llm.requests[0]
    assert body["model"] == "judge-mini"
    assert body["temperature"] == 0.0
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"] == MESSAGES
    assert messages == MESSAGES  # the caller's list is not mutated
    for absent in ("service_tier", "max_tokens", "top_k"):
        assert absent not in body
    assert stats["scorer.calls"] == 1
    assert stats["scorer.repaired_json"] == 0
    assert stats["scorer.invalid_output"] == 0
    assert usage[("scorer", "judge-mini")].prompt_tokens > 0
    assert usage[("scorer", "judge-mini")].completion_tokens == len(GOOD) // 4


async def test_agent_options_override_default(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content=GOOD), Reply(content=GOOD))
    overrides = {
        "agents.default.model": "judge-mini",
        "agents.default.temperature": 0.0,
        "agents.default.response_format": {"type": "json_object"},
        "agents.scorer.model": "judge-large",
        "agents.scorer.temperature": 0.7,
        "agents.scorer.max_tokens": 256,
        "agents.scorer.service_tier": "flex",
        "agents.scorer.extra_body": {"top_k": 5, "provider": {"order": ["a", "b"]}},
    }
    async with open_gateway(tmp_path, fake_llm, **overrides) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
        assert await gateway.structured("analyzer", MESSAGES, Verdict) == EXPECTED

    scorer, analyzer = fake_llm.requests
    assert scorer["model"] == "judge-large"
    assert scorer["temperature"] == 0.7
    assert scorer["max_tokens"] == 256
    assert scorer["service_tier"] == "flex"
    assert scorer["top_k"] == 5  # extra_body fields are merged into the request body
    assert scorer["provider"] == {"order": ["a", "b"]}
    assert scorer["response_format"] == {"type": "json_object"}  # inherited from default
    assert scorer["messages"] == MESSAGES
    # The analyzer has no override: it still gets the default options only.
    assert analyzer["model"] == "judge-mini"
    assert analyzer["temperature"] == 0.0
    for absent in ("service_tier", "max_tokens", "top_k", "provider"):
        assert absent not in analyzer


async def test_unusual_message_content_is_sent_verbatim(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content=GOOD))
    messages = [{"role": "user", "content": 'Quote: "x"\nünïcødé {not json} ' + "z" * 5000}]
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("updater", messages, Verdict) == EXPECTED
    assert fake_llm.requests[0]["messages"] == messages


# --- the call log ---------------------------------------------------------------------------


async def test_call_log_success_line(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content=GOOD))
    token = request_id_var.set("req-123")
    try:
        async with open_gateway(tmp_path, fake_llm, **{"agents.scorer.model": "m-1"}) as gateway:
            await gateway.structured("scorer", MESSAGES, Verdict, step=7)
    finally:
        request_id_var.reset(token)

    (line,) = call_log(tmp_path)
    assert line["agent"] == "scorer"
    assert line["model"] == "m-1"
    assert line["step"] == 7
    assert line["attempt"] == 1
    assert line["outcome"] == "ok"
    assert line["request_id"] == "req-123"
    assert line["reask"] is False
    assert line["backend"] == fake_llm.url
    assert isinstance(line["time"], float) and line["time"] > 1.7e9  # a Unix time, in s
    assert isinstance(line["latency_ms"], float) and line["latency_ms"] > 0
    assert line["prompt_tokens"] == sum(len(m["content"]) for m in MESSAGES) // 4
    assert line["completion_tokens"] == len(GOOD) // 4
    assert "error" not in line


async def test_call_log_one_line_per_attempt(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(
        Reply(status=503, content="overloaded"),
        Reply(status=429, content="slow down"),
        Reply(content=GOOD),
        Reply(status=400, content="bad request: unknown field"),
    )
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("analyzer", MESSAGES, Verdict, step=1) == EXPECTED
        with pytest.raises(LLMUnavailableError):
            await gateway.structured("analyzer", MESSAGES, Verdict, step=2)

    lines = call_log(tmp_path)
    assert len(lines) == len(fake_llm.requests) == 4
    assert [(x["step"], x["attempt"], x["outcome"]) for x in lines] == [
        (1, 1, "transient_error"),
        (1, 2, "transient_error"),
        (1, 3, "ok"),
        (2, 1, "error"),
    ]
    assert all(x["agent"] == "analyzer" and x["request_id"] is None for x in lines)
    assert "503" in lines[0]["error"] and "InternalServerError" in lines[0]["error"]
    assert "429" in lines[1]["error"] and "RateLimitError" in lines[1]["error"]
    assert "400" in lines[3]["error"] and "unknown field" in lines[3]["error"]
    for failed in (lines[0], lines[1], lines[3]):
        assert "prompt_tokens" not in failed
        assert isinstance(failed["latency_ms"], float) and failed["latency_ms"] > 0
    assert "error" not in lines[2]


async def test_call_log_request_id_per_task(tmp_path: Path, fake_llm: FakeLLM) -> None:
    async def call(request_id: str) -> None:
        request_id_var.set(request_id)
        await gateway.structured("scorer", MESSAGES, Verdict)

    fake_llm.push(*[Reply(content=GOOD, delay_s=0.05) for _ in range(3)])
    async with open_gateway(tmp_path, fake_llm) as gateway:
        await asyncio.gather(call("a"), call("b"), call("c"))
    assert sorted(x["request_id"] for x in call_log(tmp_path)) == ["a", "b", "c"]


async def test_call_log_disabled_writes_nothing(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content=GOOD))
    settings = llm_settings(tmp_path, fake_llm)
    gateway = LLMGateway(settings, build_providers(settings))
    try:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
    finally:
        await gateway.close()
    assert not (tmp_path / "logs").exists()


# --- build_providers ------------------------------------------------------------------------


async def test_build_providers_offline_without_key_or_url(tmp_path: Path) -> None:
    providers = build_providers(make_settings(tmp_path))
    assert set(providers) == set(AGENTS)
    assert all(isinstance(p, OfflineProvider) and p.offline is True for p in providers.values())


async def test_build_providers_default_base_url(tmp_path: Path, fake_llm: FakeLLM) -> None:
    providers = build_providers(llm_settings(tmp_path, fake_llm))
    assert set(providers) == set(AGENTS)
    first = providers["scorer"]
    assert isinstance(first, OpenAIProvider) and first.offline is False
    assert first.description == fake_llm.url
    # One endpoint, one client: every agent shares the same provider.
    assert all(p is first for p in providers.values())
    await first.close()


async def test_build_providers_base_url_without_key(tmp_path: Path) -> None:
    providers = build_providers(
        make_settings(tmp_path, **{"client.default.base_url": "http://127.0.0.1:9/v1"})
    )
    assert all(isinstance(p, OpenAIProvider) for p in providers.values())
    await providers["scorer"].close()


async def test_build_providers_api_key_only_is_openai(tmp_path: Path) -> None:
    providers = build_providers(make_settings(tmp_path, **{"client.default.api_key": "sk-x"}))
    assert all(p.offline is False for p in providers.values())
    assert providers["scorer"].description == "https://api.openai.com/v1"
    await providers["scorer"].close()


async def test_build_providers_agent_override(tmp_path: Path, fake_llm: FakeLLM) -> None:
    other = "http://127.0.0.1:9/other/v1"
    providers = build_providers(
        llm_settings(tmp_path, fake_llm, **{"client.analyzer.base_url": other})
    )
    assert providers["analyzer"].description == other
    assert providers["analyzer"] is not providers["scorer"]
    for agent in AGENTS:
        if agent != "analyzer":
            assert providers[agent].description == fake_llm.url
            assert providers[agent] is providers["scorer"]
    for provider in {id(p): p for p in providers.values()}.values():
        await provider.close()


async def test_build_providers_serves_opted_in_agents_offline(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    providers = build_providers(
        llm_settings(
            tmp_path, fake_llm, **{"client.analyzer.offline": True, "client.updater.offline": True}
        )
    )
    assert [a for a in AGENTS if providers[a].offline] == ["analyzer", "updater"]
    assert providers["scorer"].description == fake_llm.url
    await providers["scorer"].close()


async def test_agent_override_routes_only_that_agent(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # The analyzer points at an endpoint where nothing listens: only it fails.
    overrides = {"client.analyzer.base_url": "http://127.0.0.1:9/v1", "gateway.max_attempts": 2}
    fake_llm.push(Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm, **overrides) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
        with pytest.raises(LLMUnavailableError, match="2 attempts failed"):
            await gateway.structured("analyzer", MESSAGES, Verdict)
    assert len(fake_llm.requests) == 1
    analyzer_lines = [x for x in call_log(tmp_path) if x["agent"] == "analyzer"]
    assert [x["outcome"] for x in analyzer_lines] == ["transient_error"] * 2
    assert all("APIConnectionError" in x["error"] for x in analyzer_lines)


async def test_offline_provider_makes_no_http_request(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = make_settings(tmp_path)
    gateway = LLMGateway(settings, build_providers(settings), CallLog(tmp_path / "logs"))
    # Not an amaris agent prompt: the offline judge refuses, which is not transient.
    with pytest.raises(LLMUnavailableError):
        await gateway.structured("scorer", MESSAGES, Verdict)
    await gateway.close()
    assert fake_llm.requests == []
    (line,) = call_log(tmp_path)
    assert line["outcome"] == "error"
    assert line["backend"].startswith("offline")


# --- parse_json_object ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected", "repaired"),
    [
        ('{"a": 1}', {"a": 1}, False),
        ('  \n{"a": {"b": [1, 2]}}\n ', {"a": {"b": [1, 2]}}, False),
        ("{}", {}, False),
        ('{"a": 1,}', {"a": 1}, True),
        ("{'a': 'x'}", {"a": "x"}, True),
        ('```json\n{"a": 1}\n```', {"a": 1}, True),
        ('Sure! Here is my verdict: {"a": 1}', {"a": 1}, True),
        ('{"a": 1} Hope this helps.', {"a": 1}, True),
        ('{"a": [1, 2', {"a": [1, 2]}, True),
        ('{"a": true, "b": null,}', {"a": True, "b": None}, True),
    ],
)
def test_parse_json_object(text: str, expected: dict[str, Any], repaired: bool) -> None:
    assert parse_json_object(text) == (expected, repaired)


@pytest.mark.parametrize(
    "text", ["", "   ", "hello there", "null", "42", '"a string"', "[1, 2]", '[{"a": 1}]']
)
def test_parse_json_object_rejects_non_objects(text: str) -> None:
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_json_object(text)


# --- is_transient ---------------------------------------------------------------------------

_REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def _status_error(status: int) -> openai.APIStatusError:
    return openai.APIStatusError(
        f"status {status}", response=httpx2.Response(status, request=_REQUEST), body=None
    )


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 520, 529])
def test_is_transient_status(status: int) -> None:
    assert is_transient(_status_error(status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422, 501])
def test_is_not_transient_status(status: int) -> None:
    assert not is_transient(_status_error(status))


@pytest.mark.parametrize(
    "exc",
    [
        openai.APITimeoutError(request=_REQUEST),
        openai.APIConnectionError(request=_REQUEST),
        TimeoutError(),
    ],
)
def test_is_transient_network(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize(
    "exc", [ValueError("x"), RuntimeError("x"), KeyError("x"), openai.OpenAIError("x")]
)
def test_is_not_transient_other(exc: BaseException) -> None:
    assert not is_transient(exc)
