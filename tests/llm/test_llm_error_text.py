"""An endpoint's error text is read without a backtracking regex.

The error body may quote the request (the policy's reply), so ``amaris.llm`` reads it with
RE2 or ``str`` methods (the import contract in pyproject.toml forbids ``re`` there).
"""

from __future__ import annotations

import httpx
import openai
import pytest

from amaris.llm.budget import stated_prompt_tokens
from amaris.llm.gateway import is_context_overflow
from amaris.llm.output_mode import refuses_format
from tests.support.degenerate import mixed, opener


def status_error(status: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    return openai.APIStatusError(
        message, response=httpx.Response(status, request=request), body=None
    )


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 4096 tokens.",
        "Error code: context_length_exceeded",
        "The prompt exceeds the CONTEXT WINDOW of the model",
        "Too Many Tokens in the request",
        "prompt is too long: 300000 tokens > 200000 maximum",
        "Context Length exceeded",
    ],
)
def test_an_overflow_is_recognised_in_any_case(message: str) -> None:
    assert is_context_overflow(status_error(400, message))
    assert is_context_overflow(status_error(413, message))
    assert not is_context_overflow(status_error(500, message))


def test_other_errors_are_not_an_overflow() -> None:
    assert not is_context_overflow(status_error(400, "invalid model: gpt-5"))
    assert not is_context_overflow(status_error(400, "context" + " " * 10_000 + "length"))
    assert not is_context_overflow(ValueError("maximum context length"))


@pytest.mark.parametrize(
    "message", ["Unsupported RESPONSE_FORMAT", "json_schema is not supported by this model"]
)
def test_a_format_refusal_is_recognised(message: str) -> None:
    assert refuses_format(status_error(400, message))
    assert not refuses_format(status_error(422, message))


def test_other_400s_are_not_a_format_refusal() -> None:
    assert not refuses_format(status_error(400, "maximum context length is 4096 tokens"))


@pytest.mark.parametrize(
    ("error", "tokens"),
    [
        (
            "maximum context length is 4096 tokens (5000 in the messages, 100 in the completion)",
            5000,
        ),
        ("However, your messages resulted in 6123 tokens.", 6123),
        ("no count here", None),
    ],
)
def test_the_stated_prompt_tokens_are_read(error: str, tokens: int | None) -> None:
    assert stated_prompt_tokens(error) == tokens


@pytest.mark.parametrize("quoted", [mixed(100_000), opener(100_000), "1" * 100_000])
def test_an_error_quoting_a_100_kb_reply_is_read(quoted: str) -> None:
    # The endpoint quotes the request: each matcher finishes (RE2, str.casefold and in).
    error = f"maximum context length exceeded: {quoted} (5000 in the messages)"
    assert is_context_overflow(status_error(400, error))
    assert not refuses_format(status_error(400, quoted))
    assert stated_prompt_tokens(error) == 5000
