"""Chat providers behind the gateway: any OpenAI-compatible endpoint, or the offline judge.

A provider sends one request (no retries: the gateway owns them) and says what a failed
one means (:meth:`ChatProvider.failure`, after inspect_ai's ``ModelAPI.should_retry``):
the gateway decides from that whether to ask again, never from the error's type itself.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import openai

from amaris.llm.outgoing import call_out
from amaris.llm.output_mode import RequestFormat, refuses_format
from amaris.llm.rate_headers import RateHeaders, read_rate_headers
from amaris.llm.transport import ChatBody, JsonEndpoint, ResponseTooLargeError
from amaris.offline.judge import respond
from amaris.offline.sampling import VerdictSampler
from amaris.redact import redact_url
from amaris.settings import ResolvedAgentOptions, Settings, has_endpoint, secret_value
from amaris.text.offload import off_loop_above
from amaris.text_fields import storable

TOP_LOGPROBS = 10
"""``top_logprobs`` asked for with ``agents.scorer.logprobs``: room for the five score
tokens beside spellings of them (`` 4``) and other tokens (OpenAI allows up to 20)."""
OFFLINE_ON_LOOP_CHARS = 384
"""Longest request (its non-system messages) the offline judge answers on the event loop; a
longer one is answered in a worker thread: its rules read the candidate answers of a reply,
cheap on a short message but a stall of the loop on a long one."""


_TRANSIENT_STATUS = {408, 409, 425, 429}
# Every other 5xx is transient (500-504, and the 52x/529 of proxies and overloaded
# providers), except the two that say the server will never handle this request.
_PERMANENT_SERVER_STATUS = {501, 505}
_CONTEXT_OVERFLOW = (
    "context length",
    "context_length",
    "context window",
    "maximum context",
    "too many tokens",
    "prompt is too long",
)
"""What an overflow error says (any case); looked for with ``in``, one pass each."""

FailureKind = Literal["oversize", "transient", "context_overflow", "error"]


@dataclass(frozen=True)
class Failure:
    """What a failed request means: its kind, and the hints the endpoint gave."""

    kind: FailureKind
    """``oversize``: the body passed ``max_response_bytes`` (not asked again);
    ``transient``: worth another attempt; ``context_overflow``: the request is longer than
    the model's window; ``error``: refused for good."""
    refuses_format: bool = False
    """A ``400`` naming the structured-output format: the next request may ask for less."""
    retry_after: float | None = None
    """Seconds the endpoint asked to wait (``Retry-After``), when it did."""
    rate_limit: RateHeaders | None = None
    """What the error response's headers said of the endpoint's rate limits."""
    rate_limited: bool = False
    """A 429: the endpoint refused the request for its rate limit."""


def is_context_overflow(exc: BaseException) -> bool:
    """A 400 (or 413) saying the request does not fit the model's context window (OpenAI's
    ``context_length_exceeded``, vLLM's "maximum context length is N tokens")."""
    if not (isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 413)):
        return False
    text = str(exc).casefold()
    return any(phrase in text for phrase in _CONTEXT_OVERFLOW)


def is_transient(exc: BaseException) -> bool:
    """Errors worth another attempt: rate limits, server errors, timeouts, lost connections."""
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError | asyncio.TimeoutError):
        return True
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        return code in _TRANSIENT_STATUS or (code >= 500 and code not in _PERMANENT_SERVER_STATUS)
    return False


def openai_failure(exc: BaseException) -> Failure:
    """What ``exc`` of a request to an OpenAI-compatible endpoint means: the errors are the
    ``openai`` SDK's (:class:`~amaris.llm.transport.JsonEndpoint` raises them), plus the
    transport's oversize and the gateway's timeout backstop (``TimeoutError``)."""
    if isinstance(exc, ResponseTooLargeError):
        return Failure("oversize")
    refused = refuses_format(exc)
    if is_transient(exc):
        if isinstance(exc, openai.APIStatusError):
            limited = read_rate_headers(exc.response.headers)
            wait = limited.retry_after if limited is not None else None
            return Failure("transient", refused, wait, limited, rate_limited=exc.status_code == 429)
        return Failure("transient", refused)
    kind: FailureKind = "context_overflow" if is_context_overflow(exc) else "error"
    return Failure(kind, refused)


@dataclass(frozen=True)
class TokenLogprob:
    """One output token with its log probability and the most likely alternatives at its
    position (``choices[0].logprobs.content[i]`` of a chat completion)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    """``(token, logprob)`` of ``top_logprobs``, as the server lists them."""


@dataclass(frozen=True)
class Completion:
    """Text of one chat completion, its reasoning, why it ended, and its token usage."""

    content: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning: str | None = None
    """The ``reasoning_content`` (or ``reasoning``) field, when the server returns one."""
    finish_reason: str | None = None
    """``stop``, ``length`` (cut by ``max_tokens``)..., as the server reports it."""
    reasoning_tokens: int | None = None
    """``usage.completion_tokens_details.reasoning_tokens``, when reported."""
    cached_tokens: int | None = None
    """``usage.prompt_tokens_details.cached_tokens`` (prompt tokens served from the
    provider's prefix cache), when reported."""
    logprobs: tuple[TokenLogprob, ...] | None = None
    """The answer's tokens with their log probabilities, when asked for and returned."""
    rate_limit: RateHeaders | None = None
    """What the response's headers said of the endpoint's rate limits, when they did."""


class ChatProvider(Protocol):
    """One chat-completion request, no retries (the gateway owns them).

    :meth:`complete` calls :func:`~amaris.llm.outgoing.call_out` once the request is with
    the judge (a provider that does not is out when its call ends)."""

    description: str
    offline: bool

    async def complete(
        self,
        agent: str,
        messages: list[dict[str, str]],
        options: ResolvedAgentOptions,
        response_format: RequestFormat | None = None,
    ) -> Completion: ...

    def failure(self, exc: BaseException) -> Failure:
        """What ``exc``, raised by :meth:`complete` (or the gateway's timeout around it),
        means: whether to ask again (:func:`openai_failure` for OpenAI-compatible errors)."""
        ...

    async def models(self, timeout: float) -> dict[str, int | None]:
        """The models the endpoint lists, each with its context window when it says
        (``max_model_len``, as vLLM does), else None."""
        ...

    async def close(self) -> None: ...


def chat_body(
    messages: list[dict[str, str]],
    options: ResolvedAgentOptions,
    response_format: RequestFormat | None = None,
) -> ChatBody:
    """The JSON body of a chat-completion request with an agent's options, but for its
    ``extra_body`` (:meth:`~amaris.llm.transport.JsonEndpoint.post` adds it).

    ``response_format`` is the one the gateway chose (see :mod:`amaris.llm.output_mode`).
    """
    body: ChatBody = {"model": options.model, "messages": messages}
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.max_tokens is not None:
        body["max_tokens"] = options.max_tokens
    if response_format is not None:
        body["response_format"] = response_format
    if options.service_tier is not None:
        body["service_tier"] = options.service_tier
    if options.logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = TOP_LOGPROBS
    return body


class OpenAIProvider:
    """An OpenAI-compatible endpoint, configured as an ``openai.AsyncOpenAI`` client.

    The client holds the endpoint's configuration (base URL, key, auth and platform
    headers) and defines the errors. Requests go through
    :class:`~amaris.llm.transport.JsonEndpoint` (``aiohttp``), which sends the body with
    those headers and raises those errors for less CPU than the SDK's request path. The
    answer is read from the response's JSON.
    """

    offline = False

    def __init__(self, api_key: str | None, base_url: str | None) -> None:
        # max_retries=0: retries live in exactly one layer, the gateway's, so the
        # attempt budget written in GatewaySettings is the real one.
        self._sdk = openai.AsyncOpenAI(api_key=api_key or "EMPTY", base_url=base_url, max_retries=0)
        self._endpoint = JsonEndpoint(self._sdk)
        # Shown in /healthz and written in every call-log line: no credentials in it.
        self.description = redact_url(base_url or "https://api.openai.com/v1")

    async def complete(
        self,
        agent: str,
        messages: list[dict[str, str]],
        options: ResolvedAgentOptions,
        response_format: RequestFormat | None = None,
    ) -> Completion:
        body = chat_body(messages, options, response_format)
        headers: list[Mapping[str, str]] = []
        raw = await self._endpoint.post(
            "chat/completions",
            body,
            options.timeout,
            options.max_response_bytes,
            options.extra_body,
            on_headers=headers.append,
        )
        completion = parse_completion(raw)
        limited = read_rate_headers(headers[0]) if headers else None
        return completion if limited is None else replace(completion, rate_limit=limited)

    def failure(self, exc: BaseException) -> Failure:
        return openai_failure(exc)

    async def models(self, timeout: float) -> dict[str, int | None]:
        listed: dict[str, int | None] = {}
        async for model in self._sdk.with_options(timeout=timeout).models.list():
            # Fields beyond OpenAI's own (vLLM's max_model_len) are the model's extras.
            length = (model.model_extra or {}).get("max_model_len")
            listed[model.id] = length if isinstance(length, int) and length > 0 else None
        return listed

    async def close(self) -> None:
        await self._endpoint.close()
        await self._sdk.close()


def parse_completion(raw: bytes) -> Completion:
    """The first choice's text, reasoning and finish reason, and the token usage of a
    chat-completion response body.

    Text is made storable (:func:`~amaris.models.storable`): the body is the endpoint's.

    Raises:
        ValueError: the body is not a chat-completion JSON object (or nests too deep to
            parse).
    """
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ValueError("the chat-completion response nests too deep to parse") from None
    if not isinstance(data, dict):
        raise ValueError("the chat-completion response is not a JSON object")
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    message = message if isinstance(message, dict) else {}
    content = message.get("content")
    # vLLM and DeepSeek name it reasoning_content; OpenRouter and newer vLLM, reasoning.
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    finish_reason = first.get("finish_reason") if isinstance(first, dict) else None
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return Completion(
        content=storable(content) if isinstance(content, str) else "",
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        reasoning=storable(reasoning) if isinstance(reasoning, str) and reasoning else None,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        reasoning_tokens=_count(usage.get("completion_tokens_details"), "reasoning_tokens"),
        cached_tokens=_count(usage.get("prompt_tokens_details"), "cached_tokens"),
        logprobs=parse_logprobs(first.get("logprobs") if isinstance(first, dict) else None),
    )


def _count(section: Any, name: str) -> int | None:
    """A token count of a ``usage`` section; None when absent or not a count (servers send
    ``null`` for what they do not measure)."""
    value = section.get(name) if isinstance(section, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def parse_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    """The tokens of a choice's ``logprobs`` object (``{"content": [{"token", "logprob",
    "top_logprobs": [...]}, ...]}``); None when it is absent or not of that shape.

    Values are kept as sent (an integer too large for a float becomes infinity): whether
    they are log probabilities is for their reader to check (:mod:`amaris.scoring.verdicts`).
    """
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        return None
    tokens: list[TokenLogprob] = []
    for item in content:
        logprob = _number(item.get("logprob")) if isinstance(item, dict) else None
        if logprob is None or not isinstance(item.get("token"), str):
            return None
        top = item.get("top_logprobs")
        alternatives = tuple(
            (storable(alt["token"]), value)
            for alt in (top if isinstance(top, list) else ())
            if isinstance(alt, dict)
            and isinstance(alt.get("token"), str)
            and (value := _number(alt.get("logprob"))) is not None
        )
        tokens.append(TokenLogprob(storable(item["token"]), logprob, alternatives))
    return tuple(tokens)


def _number(value: Any) -> float | None:
    """A JSON number as a float (an integer past the float range: infinity of its sign);
    None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


class OfflineProvider:
    """The built-in rule-based judge, in process. Deterministic; not an LLM.

    At a scorer temperature above 0, or with ``agents.scorer.logprobs``, its verdicts carry
    the seeded doubt of :mod:`amaris.offline.sampling`.
    """

    offline = True
    description = "offline (rule-based, NOT an LLM)"

    def __init__(self) -> None:
        self._sampler = VerdictSampler()

    async def complete(
        self,
        agent: str,
        messages: list[dict[str, str]],
        options: ResolvedAgentOptions,
        response_format: RequestFormat | None = None,
    ) -> Completion:
        call_out()  # the judge is this process: the call is with it
        chars = sum(len(m.get("content") or "") for m in messages if m.get("role") != "system")
        return await off_loop_above(chars, OFFLINE_ON_LOOP_CHARS, self._answer, messages, options)

    def _answer(self, messages: list[dict[str, str]], options: ResolvedAgentOptions) -> Completion:
        sampled = self._sampler.reply(
            messages, options.temperature or 0.0, options.logprobs, TOP_LOGPROBS
        )
        if sampled is not None:
            return Completion(
                content=sampled.content,
                prompt_tokens=0,
                completion_tokens=0,
                logprobs=parse_logprobs({"content": sampled.logprobs}),
            )
        content = respond(messages)
        return Completion(content=content, prompt_tokens=0, completion_tokens=0)

    def failure(self, exc: BaseException) -> Failure:
        # Rules raise none of an endpoint's errors: only the gateway's timeout is transient.
        return openai_failure(exc)

    async def models(self, timeout: float) -> dict[str, int | None]:
        return {}  # rules, not a model: no context window

    async def close(self) -> None:
        return None


def build_providers(settings: Settings) -> dict[str, ChatProvider]:
    """One provider per agent: its endpoint's, or the offline judge for an agent with none
    (all agents, or those with ``client.<agent>.offline``: settings refuse any other mix)."""
    offline = OfflineProvider()
    by_endpoint: dict[tuple[str | None, str | None], ChatProvider] = {}
    providers: dict[str, ChatProvider] = {}
    for agent in settings.served_agents:
        client = settings.client.for_agent(agent)
        if not has_endpoint(client):
            providers[agent] = offline
            continue
        key = (secret_value(client.api_key), client.base_url)
        if key not in by_endpoint:
            by_endpoint[key] = OpenAIProvider(*key)
        providers[agent] = by_endpoint[key]
    return providers
