"""The chat-completions wire format as the simulator's judge server speaks it.

:mod:`amaris.sim.judge_server` reads a few fields of a request body and writes the whole
answer; these TypedDicts say which (the bodies stay plain JSON dicts at run time, so a
client's other fields pass through unread and the types change no byte of the answers).
"""

from __future__ import annotations

from typing import Required, TypedDict

from amaris.offline.sampling import TokenLogprob


class ChatRequest(TypedDict, total=False):
    """What the simulated judges read of a ``POST /v1/chat/completions`` body."""

    model: str
    messages: list[dict[str, str]]
    """amaris's agent messages: ``role`` and ``content``, both text."""
    temperature: float
    logprobs: bool
    top_logprobs: int


class AnswerMessage(TypedDict, total=False):
    """``choices[0].message`` of an answer."""

    role: Required[str]
    content: Required[str]
    reasoning_content: str
    """A reasoning model's separate field (vLLM, DeepSeek)."""


class AnswerLogprobs(TypedDict):
    """``choices[0].logprobs`` of an answer."""

    content: list[TokenLogprob]


class AnswerChoice(TypedDict):
    """The one choice of an answer."""

    index: int
    message: AnswerMessage
    finish_reason: str
    logprobs: AnswerLogprobs | None


class ReasoningTokens(TypedDict):
    """``usage.completion_tokens_details``."""

    reasoning_tokens: int


class CachedTokens(TypedDict):
    """``usage.prompt_tokens_details``."""

    cached_tokens: int


class AnswerUsage(TypedDict, total=False):
    """``usage`` of an answer."""

    prompt_tokens: Required[int]
    completion_tokens: Required[int]
    total_tokens: Required[int]
    completion_tokens_details: ReasoningTokens
    prompt_tokens_details: CachedTokens


class ChatAnswer(TypedDict, total=False):
    """A chat completion (``object: chat.completion``), with or without ``usage``."""

    id: Required[str]
    object: Required[str]
    created: Required[int]
    model: Required[str]
    choices: Required[list[AnswerChoice]]
    usage: AnswerUsage


class ModelCard(TypedDict, total=False):
    """One model of ``GET /v1/models``."""

    id: Required[str]
    object: Required[str]
    max_model_len: int
    """vLLM's context window (tokens)."""


class ModelList(TypedDict):
    """``GET /v1/models``."""

    object: str
    data: list[ModelCard]
