"""Chat providers behind the gateway: any OpenAI-compatible endpoint, or the offline judge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import openai
from openai.types.chat import ChatCompletion

from amaris.settings import ResolvedAgentOptions


@dataclass(frozen=True)
class Completion:
    """Text of one chat completion and its token usage."""

    content: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ChatProvider(Protocol):
    """One chat-completion request, no retries (the gateway owns them)."""

    description: str
    offline: bool

    async def complete(
        self, agent: str, messages: list[dict[str, str]], options: ResolvedAgentOptions
    ) -> Completion: ...

    async def close(self) -> None: ...


def chat_body(messages: list[dict[str, str]], options: ResolvedAgentOptions) -> dict[str, Any]:
    """The JSON body of a chat-completion request with an agent's options."""
    body: dict[str, Any] = {"model": options.model, "messages": messages}
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.max_tokens is not None:
        body["max_tokens"] = options.max_tokens
    if options.response_format is not None:
        body["response_format"] = options.response_format
    if options.service_tier is not None:
        body["service_tier"] = options.service_tier
    if options.extra_body is not None:
        body.update(options.extra_body)
    return body


class OpenAIProvider:
    """An OpenAI-compatible endpoint through ``openai.AsyncOpenAI``.

    Two measured costs on the hot path shape this class (``docs/benchmarks.md``): the
    HTTP pool checks every pooled connection on each request, so requests are spread
    over ``shards`` clients with smaller pools; and the SDK's reflective request
    transform costs ~0.4 ms a call, so the body is sent as the plain JSON it already is
    through the client's own ``post`` (same auth, errors, timeouts and response model).
    """

    offline = False

    def __init__(self, api_key: str | None, base_url: str | None, shards: int = 8) -> None:
        # max_retries=0: retries live in exactly one layer, the gateway's, so the
        # attempt budget written in GatewaySettings is the real one.
        self._clients = [
            openai.AsyncOpenAI(api_key=api_key or "EMPTY", base_url=base_url, max_retries=0)
            for _ in range(max(1, shards))
        ]
        self._next = 0
        self.description = base_url or "https://api.openai.com/v1"

    async def complete(
        self, agent: str, messages: list[dict[str, str]], options: ResolvedAgentOptions
    ) -> Completion:
        body = chat_body(messages, options)
        client = self._clients[self._next]
        self._next = (self._next + 1) % len(self._clients)
        response = await client.post(
            "/chat/completions", cast_to=ChatCompletion, body=body,
            options={"timeout": options.timeout},
        )
        if not response.choices:
            return Completion(content="")
        usage = response.usage
        return Completion(
            content=response.choices[0].message.content or "",
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )

    async def close(self) -> None:
        for client in self._clients:
            await client.close()


class OfflineProvider:
    """The built-in rule-based judge, in process. Deterministic; not an LLM."""

    offline = True
    description = "offline (rule-based, NOT an LLM)"

    async def complete(
        self, agent: str, messages: list[dict[str, str]], options: ResolvedAgentOptions
    ) -> Completion:
        from amaris.offline.judge import respond

        content = respond(messages)
        return Completion(content=content, prompt_tokens=0, completion_tokens=0)

    async def close(self) -> None:
        return None
