"""An in-process scripted chat provider: the LLM faked at the gateway seam, in process.

:class:`ScriptedProvider` implements the gateway's public
:class:`~amaris.llm.providers.ChatProvider` protocol (an OpenAI-compatible endpoint, not the
offline judge: the gateway sends it a ``response_format``), so the real
:class:`~amaris.llm.gateway.LLMGateway` (validation, re-ask, errors, context windows, the
retry layer) stands between it and the code under test. It answers each request with the
next scripted answer: a :class:`Completion` (a malformed or cut reply among them), an error
to raise (the ``openai`` SDK's, as an endpoint's: :func:`status`, :func:`timeout`,
:func:`context_overflow`) or a function of the request; it can hold every request
(``hold``), and a :class:`Clock` given to it is advanced by ``seconds`` per request, so the
gateway's latencies and ledger seconds are exact (see :func:`use_clock`).

It needs no server and no conftest fixture: the fast unit tests of the hot path and of the
gateway (tests/scoring/test_scorer.py, test_reward.py, test_gateway_unit.py,
test_gateway_attempt_unit.py) and their mutation runs (``bench/evaluations/mutation.py``,
``--noconftest``) use it. tests/support/fake_llm.py is the same idea over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx2
import openai

from amaris.agents.prompts import load_prompts, parse_data_message
from amaris.llm import attempt
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway
from amaris.llm.outgoing import call_out
from amaris.llm.output_mode import RequestFormat
from amaris.llm.providers import Completion, Failure, openai_failure
from amaris.settings import ResolvedAgentOptions, Settings, load_settings

if TYPE_CHECKING:
    import pytest

Answer = Completion | BaseException | Callable[["Call"], Completion]

MODEL = "judge-model"
GOOD = json.dumps({"value": 7, "reason": "ok"})
MESSAGES: list[dict[str, str]] = [
    {"role": "system", "content": "Reply with JSON."},
    {"role": "user", "content": "What is 3 + 4?"},
]
_REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


@dataclass
class Call:
    """One request the provider received."""

    messages: list[dict[str, str]]
    response_format: dict[str, Any] | None
    agent: str = ""

    def rollout(self) -> dict[str, str]:
        """The rollout in the scorer's user message."""
        return parse_data_message(self.messages[-1]["content"])["rollout"]

    def criteria(self) -> list[dict[str, str]]:
        """The criteria in the scorer's system message."""
        return parse_data_message(self.messages[0]["content"])["criteria"]


@dataclass
class Clock:
    """``perf_counter`` and ``time`` for :mod:`amaris.llm.attempt`, moved by the provider."""

    now: float = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_800_000_000.0


def use_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Give :mod:`amaris.llm.attempt` (only) a clock the provider moves."""
    clock = Clock()
    monkeypatch.setattr(attempt, "time", clock)
    return clock


@dataclass
class ScriptedProvider:
    """Answers each call with the next of ``script``, else with ``default``: a
    :class:`Completion`, an exception to raise, or a function of the call.

    ``hold``: when set, every call waits until the event is set (after ``arrived`` is set).
    ``clock``: advanced by ``seconds`` per call. ``windows``: its ``/v1/models``.
    """

    script: list[Answer] = field(default_factory=list)
    default: Answer | None = None
    hold: asyncio.Event | None = None
    clock: Clock | None = None
    seconds: float = 0.123456
    windows: dict[str, int | None] = field(default_factory=dict)
    description: str = "http://127.0.0.1:9/v1"
    offline: bool = False
    calls: list[Call] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    listed: int = 0
    closed: int = 0

    async def complete(
        self,
        agent: str,
        messages: list[dict[str, str]],
        options: ResolvedAgentOptions,
        response_format: RequestFormat | None = None,
    ) -> Completion:
        # A shallow copy, same fields: the tests read it as the JSON sent.
        sent = None if response_format is None else dict(response_format)
        call = Call(messages, sent, agent)
        self.calls.append(call)
        if self.clock is not None:
            self.clock.now += self.seconds
        answer = self.script.pop(0) if self.script else self.default
        call_out()
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
        self.listed += 1
        return dict(self.windows)  # none by default: tests set agents.scorer.context_window

    async def close(self) -> None:
        self.closed += 1


def answer(content: str = GOOD, **usage: Any) -> Completion:
    return Completion(content=content, **usage)


def verdicts(*scores: tuple[str, int], reason: str = "ok") -> Completion:
    """A judge reply: one verdict per (criterion id, score)."""
    body = {"verdicts": [{"id": cid, "reason": reason, "score": s} for cid, s in scores]}
    return Completion(content=json.dumps(body), prompt_tokens=10, completion_tokens=10)


def status(code: int, message: str = "error", headers: dict[str, str] | None = None) -> Exception:
    """The ``openai`` SDK's error for an HTTP ``code`` answer."""
    response = httpx2.Response(code, request=_REQUEST, headers=headers)
    return openai.APIStatusError(message, response=response, body=None)


def timeout() -> Exception:
    return openai.APITimeoutError(request=_REQUEST)


def context_overflow(stated_tokens: int) -> openai.BadRequestError:
    """The 400 an OpenAI-compatible endpoint answers when the prompt overflows its window."""
    message = (
        "This model's maximum context length is 4096 tokens. However, your messages "
        f"resulted in {stated_tokens} tokens."
    )
    response = httpx2.Response(400, request=_REQUEST)
    return openai.BadRequestError(message, response=response, body=None)


def settings(**overrides: Any) -> Settings:
    """Defaults with three attempts, millisecond backoff and :data:`MODEL` for every agent."""
    return load_settings(
        None,
        **{
            "gateway.max_attempts": 3,
            "gateway.backoff_base_seconds": 0.001,
            "gateway.backoff_max_seconds": 0.001,
            "agents.default.model": MODEL,
            **overrides,
        },
    )


def gateway(settings: Settings, provider: ScriptedProvider) -> LLMGateway:
    """The real gateway with ``provider`` behind the scorer agent."""
    return LLMGateway(settings, {"scorer": provider}, CallLog(None))


def scorer_prompt(settings: Settings) -> str:
    return load_prompts(settings.prompts)["scorer"]
