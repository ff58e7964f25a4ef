"""An OpenAI-compatible endpoint faked at the gateway seam, for the gateway's fixture-free unit
tests (tests/unit/test_gateway_unit.py, test_gateway_attempt_unit.py) and their mutation runs
(``bench/evaluations/mutation.py``, ``--noconftest``).

:class:`Endpoint` implements :class:`~amaris.llm.providers.ChatProvider`: it answers each
request with the next scripted :class:`Completion` or raises the next scripted error (the
``openai`` SDK's, as an endpoint's), and reads failures as every OpenAI-compatible endpoint
does (:func:`~amaris.llm.providers.openai_failure`). The real :class:`LLMGateway` stands
in front of it. A :class:`Clock` given to it is advanced by ``seconds`` per request: the
gateway's latencies and ledger seconds are then exact (see :func:`use_clock`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import pytest

from amaris.llm import attempt
from amaris.llm.output_mode import RequestFormat
from amaris.llm.providers import Completion, Failure, openai_failure
from amaris.settings import ResolvedAgentOptions, Settings, load_settings

MODEL = "judge-model"
GOOD = json.dumps({"value": 7, "reason": "ok"})
MESSAGES: list[dict[str, str]] = [
    {"role": "system", "content": "Reply with JSON."},
    {"role": "user", "content": "What is 3 + 4?"},
]
_REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def status(code: int, message: str = "error", headers: dict[str, str] | None = None) -> Exception:
    """The ``openai`` SDK's error for an HTTP ``code`` answer."""
    response = httpx2.Response(code, request=_REQUEST, headers=headers)
    return openai.APIStatusError(message, response=response, body=None)


def timeout() -> Exception:
    return openai.APITimeoutError(request=_REQUEST)


def answer(content: str = GOOD, **usage: Any) -> Completion:
    return Completion(content=content, **usage)


@dataclass
class Clock:
    """``perf_counter`` and ``time`` for :mod:`amaris.llm.attempt`, moved by the endpoint."""

    now: float = 1000.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_800_000_000.0


def use_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """Give :mod:`amaris.llm.attempt` (only) a clock the endpoint moves."""
    clock = Clock()
    monkeypatch.setattr(attempt, "time", clock)
    return clock


@dataclass
class Request:
    agent: str
    messages: list[dict[str, str]]
    response_format: dict[str, Any] | None


@dataclass
class Endpoint:
    """Answers each request with the next of ``script``; ``windows``: its ``/v1/models``."""

    script: list[Completion | Exception] = field(default_factory=list)
    clock: Clock | None = None
    seconds: float = 0.123456
    windows: dict[str, int | None] = field(default_factory=dict)
    description: str = "http://127.0.0.1:9/v1"
    offline: bool = False
    requests: list[Request] = field(default_factory=list)
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
        self.requests.append(Request(agent, messages, sent))
        if self.clock is not None:
            self.clock.now += self.seconds
        if not self.script:
            raise AssertionError("no scripted answer left")
        reply = self.script.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def failure(self, exc: BaseException) -> Failure:
        return openai_failure(exc)

    async def models(self, timeout: float) -> dict[str, int | None]:
        self.listed += 1
        return dict(self.windows)

    async def close(self) -> None:
        self.closed += 1


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
