"""An in-process scripted chat provider: the LLM faked at the gateway seam, in process.

It implements the gateway's public :class:`~amaris.llm.providers.ChatProvider` protocol (an
endpoint that is not the offline judge: the gateway sends it a ``response_format``), so the
real :class:`~amaris.llm.gateway.LLMGateway` (validation, re-ask, errors, context windows)
stands between it and the code under test. It needs no server and no conftest fixture: the
fast unit tests of the hot path (tests/unit/test_scorer.py, tests/unit/test_reward.py) and their
mutation runs (``bench/evaluations/mutation.py``, ``--noconftest``) use it.
tests/support/fake_llm.py is the same idea over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from amaris.agents.prompts import load_prompts, parse_data_message
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway
from amaris.llm.output_mode import RequestFormat
from amaris.llm.providers import Completion, Failure, openai_failure
from amaris.settings import ResolvedAgentOptions, Settings

Answer = Completion | BaseException | Callable[["Call"], Completion]


@dataclass
class Call:
    """One request the provider received."""

    messages: list[dict[str, str]]
    response_format: dict[str, Any] | None

    def rollout(self) -> dict[str, str]:
        """The rollout in the scorer's user message."""
        return parse_data_message(self.messages[-1]["content"])["rollout"]

    def criteria(self) -> list[dict[str, str]]:
        """The criteria in the scorer's system message."""
        return parse_data_message(self.messages[0]["content"])["criteria"]


@dataclass
class ScriptedProvider:
    """Answers each call with the next scripted answer, else with ``default``: a
    :class:`Completion`, an exception to raise, or a function of the call.

    ``hold``: when set, every call waits until the event is set (after ``arrived`` is set).
    """

    default: Answer | None = None
    script: list[Answer] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    hold: asyncio.Event | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    description: str = "scripted"
    offline: bool = False

    async def complete(
        self,
        agent: str,
        messages: list[dict[str, str]],
        options: ResolvedAgentOptions,
        response_format: RequestFormat | None = None,
    ) -> Completion:
        # A shallow copy, same fields: the tests read it as the JSON sent.
        call = Call(messages, None if response_format is None else dict(response_format))
        self.calls.append(call)
        answer = self.script.pop(0) if self.script else self.default
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        if answer is None:
            raise AssertionError("no scripted answer left")
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            return answer(call)
        return answer

    def failure(self, exc: BaseException) -> Failure:
        return openai_failure(exc)  # scripted errors are the openai SDK's, as an endpoint's

    async def models(self, timeout: float) -> dict[str, int | None]:
        return {}  # no window listed: tests set agents.scorer.context_window

    async def close(self) -> None:
        return None


def verdicts(*scores: tuple[str, int], reason: str = "ok") -> Completion:
    """A judge reply: one verdict per (criterion id, score)."""
    body = {"verdicts": [{"id": cid, "reason": reason, "score": s} for cid, s in scores]}
    return Completion(content=json.dumps(body), prompt_tokens=10, completion_tokens=10)


def context_overflow(stated_tokens: int) -> openai.BadRequestError:
    """The 400 an OpenAI-compatible endpoint answers when the prompt overflows its window."""
    message = (
        "This model's maximum context length is 4096 tokens. However, your messages "
        f"resulted in {stated_tokens} tokens."
    )
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    return openai.BadRequestError(message, response=httpx.Response(400, request=request), body=None)


def gateway(settings: Settings, provider: ScriptedProvider) -> LLMGateway:
    """The real gateway with ``provider`` behind the scorer agent."""
    return LLMGateway(settings, {"scorer": provider}, CallLog(None))


def scorer_prompt(settings: Settings) -> str:
    return load_prompts(settings.prompts)["scorer"]
