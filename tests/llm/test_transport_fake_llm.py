"""The judge's HTTP client (``amaris.llm.transport``) against the fake LLM: the real
``amaris.sim.judge_server`` app under uvicorn (the ``fake_llm`` fixture) answers the
protocol's cases: an answer with usage, reasoning and logprobs, 429 with retry-after, 5xx,
a hang, and one provider called from two event loops. The raw-socket cases are in
tests/llm/test_transport.py.
"""

from __future__ import annotations

import asyncio
import threading

import openai
import pytest

from amaris.llm.gateway import is_transient
from amaris.llm.providers import Completion, OpenAIProvider
from amaris.settings import Settings
from amaris.sim.judge_server import Reply
from tests.support.fake_llm import FakeLLM

MESSAGES = [{"role": "user", "content": "hello"}]


async def complete_via(fake: FakeLLM, timeout: float = 5.0) -> Completion:
    provider = OpenAIProvider("sk-test", fake.url)
    options = (
        Settings()
        .agents.for_agent("scorer")
        .model_copy(update={"timeout": timeout, "logprobs": True})
    )
    try:
        return await provider.complete("scorer", MESSAGES, options)
    finally:
        await provider.close()


async def test_fake_llm_answer_keeps_usage_reasoning_finish_reason_and_logprobs(
    fake_llm: FakeLLM,
) -> None:
    tokens = [
        {
            "token": "4",
            "logprob": -0.1,
            "top_logprobs": [{"token": "4", "logprob": -0.1}, {"token": "3", "logprob": -2.4}],
        }
    ]
    fake_llm.push(
        Reply(
            content='{"ok": 1}',
            reasoning="because",
            finish_reason="length",
            prompt_tokens=11,
            completion_tokens=5,
            reasoning_tokens=2,
            cached_tokens=8,
            logprobs=tokens,
        )
    )
    got = await complete_via(fake_llm)
    assert (got.content, got.reasoning, got.finish_reason) == ('{"ok": 1}', "because", "length")
    assert (got.prompt_tokens, got.completion_tokens, got.reasoning_tokens, got.cached_tokens) == (
        11,
        5,
        2,
        8,
    )
    assert got.logprobs is not None and got.logprobs[0].top == (("4", -0.1), ("3", -2.4))
    assert fake_llm.requests[-1]["messages"] == MESSAGES
    assert fake_llm.requests[-1]["logprobs"] is True


async def test_fake_llm_429_is_a_rate_limit_error_with_its_retry_after(
    fake_llm: FakeLLM,
) -> None:
    fake_llm.push(Reply(status=429, content="slow down", headers={"Retry-After": "7"}))
    with pytest.raises(openai.RateLimitError) as caught:
        await complete_via(fake_llm)
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body == {"message": "slow down", "type": "server_error"}
    assert is_transient(caught.value)


@pytest.mark.parametrize("status", [500, 503])
async def test_fake_llm_5xx_is_an_internal_server_error(fake_llm: FakeLLM, status: int) -> None:
    fake_llm.push(Reply(status=status, content="overloaded"))
    with pytest.raises(openai.InternalServerError) as caught:
        await complete_via(fake_llm)
    assert caught.value.status_code == status
    assert "overloaded" in str(caught.value)
    assert is_transient(caught.value)


async def test_fake_llm_hang_is_a_timeout(fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(hang=True))
    with pytest.raises(openai.APITimeoutError) as caught:
        await complete_via(fake_llm, timeout=0.3)
    assert is_transient(caught.value)


def test_one_provider_serves_two_event_loops(fake_llm: FakeLLM) -> None:
    # The scorer calls from the API's loop, the step agents from the pipeline's thread and
    # loop: the same provider (one per endpoint) must work from both.
    fake_llm.default = lambda body: Reply(content="ok")
    provider = OpenAIProvider("k", fake_llm.url)
    options = Settings().agents.for_agent("scorer")
    contents: list[str] = []
    pipeline = asyncio.new_event_loop()
    thread = threading.Thread(target=pipeline.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(
            provider.complete("scorer", MESSAGES, options), pipeline
        ).result(20)

        async def on_api_loop() -> None:
            contents.append((await provider.complete("scorer", MESSAGES, options)).content)
            await provider.close()  # closes the pipeline loop's session on that loop

        asyncio.run(on_api_loop())
    finally:
        pipeline.call_soon_threadsafe(pipeline.stop)
        thread.join(10)
        pipeline.close()
    assert contents == ["ok"]
    assert len(fake_llm.requests) == 2
