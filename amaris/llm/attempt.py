"""One request to an agent's endpoint, attempt by attempt: the gateway's one retry layer.

Each attempt (:meth:`Requests._attempt`) is one request and returns :class:`Ok`,
:class:`Retry` or :class:`Fail`; around it, in order: the structured-output mode and
``response_format`` (:meth:`Requests._request_format`), the limits as one context manager
(:class:`~amaris.llm.limits.Limits`, the endpoint's rate limits in it:
:mod:`amaris.llm.rate_limits`), and after it the provider's own reading of a failure
(:meth:`~amaris.llm.providers.ChatProvider.failure`), then the call log, the ledger (its
cost at the agent's price), the rate limits (settled, and told what the endpoint's
headers said), the context windows and the reasoning, each one step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from amaris.llm.budget import (
    ANSWER_RESERVE_TOKENS,
    ContextWindows,
    estimate_messages,
    stated_prompt_tokens,
)
from amaris.llm.call_log import CallLog, CallOutcome, CallRecord
from amaris.llm.errors import (
    LLMContextOverflowError,
    LLMOutputError,
    LLMResponseTooLargeError,
    LLMTransientError,
    LLMUnavailableError,
    short,
)
from amaris.llm.ledger import OFFLINE_MODEL, TokenLedger, usage_of
from amaris.llm.limits import Limits
from amaris.llm.output_fit import FittedSchemas
from amaris.llm.output_mode import (
    ModeState,
    OutputMode,
    OutputModes,
    RequestFormat,
    response_format,
)
from amaris.llm.providers import ChatProvider, Completion, Failure
from amaris.llm.rate_limits import Gate, RateLimits
from amaris.llm.reasoning import without_inline_reasoning
from amaris.llm.reply_format import (
    SHOWN_MODES,
    Examples,
    format_instructions,
    shown_example,
    with_instructions,
)
from amaris.llm.schema import SchemaNode
from amaris.request_context import request_id_var
from amaris.settings import GatewaySettings, ResolvedAgentOptions, Settings, TokenPrice

log = logging.getLogger("amaris.llm")

Mode = OutputMode | Literal["configured"]
"""The structured-output mode of a request; ``configured``: the agent's own
``response_format`` is sent as written."""
_LOGGED_REASONING_CHARS = 4000
"""Reasoning text kept in the call log per request."""
LOGGED_WAIT_SECONDS = 1.0
"""A rate-limit wait this long or longer is logged (on the step pipeline's gateway: in the
step's Prefect logs)."""


@dataclass(frozen=True)
class Call:
    """One request's fixed parts, the same for each of its attempts."""

    agent: str
    account: str | None
    """The ledger agent its usage is counted under, when not ``agent``."""
    messages: list[dict[str, str]]
    step: int | None
    output: tuple[str, SchemaNode]
    """The reply schema's name and its JSON schema."""
    reask: bool
    provider: ChatProvider
    options: ResolvedAgentOptions
    example: BaseModel | None = None
    """One reply of the expected shape, shown to the model in the modes that
    send no schema (:mod:`amaris.llm.reply_format`); None: one made from the schema."""

    @property
    def ledger_agent(self) -> str:
        return self.account or self.agent

    @property
    def ledger_model(self) -> str:
        return OFFLINE_MODEL if self.provider.offline else self.options.model


@dataclass(frozen=True)
class Ok:
    """The attempt was answered."""

    completion: Completion


@dataclass(frozen=True)
class Retry:
    """Ask again, after ``delay`` seconds (None: at once); ``counted``: the attempt counts
    against the budget (a refused output format does not)."""

    error: BaseException
    delay: float | None = None
    counted: bool = True


@dataclass(frozen=True)
class Fail:
    """Stop: ``error`` is raised, caused by ``cause``."""

    error: LLMUnavailableError | LLMOutputError
    cause: BaseException


Attempt = Ok | Retry | Fail


class Requests:
    """The requests of one gateway: its limits, and the registries and counters it shares
    (structured-output modes, context windows, ledger, call log, stats)."""

    def __init__(
        self,
        settings: Settings,
        providers: dict[str, ChatProvider],
        *,
        modes: OutputModes,
        windows: ContextWindows,
        ledger: TokenLedger,
        call_log: CallLog,
        stats: Counter[str],
        observer: Callable[[str, float], None] | None,
        rate_limits: RateLimits | None = None,
        log_waits: bool = False,
    ) -> None:
        self._budget: GatewaySettings = settings.gateway
        self._limits = Limits(settings, providers)
        self.rate_limits = rate_limits or RateLimits()
        """The endpoints' rate limits (shared by the service's two gateways)."""
        self.rate_limits.configure(settings, providers)
        self._log_waits = log_waits
        """Log every rate-limit wait of :data:`LOGGED_WAIT_SECONDS` or more at INFO (else
        DEBUG): the step pipeline's gateway, whose logs are its steps' run logs."""
        self._prices: dict[str, TokenPrice | None] = {}
        """Each agent's price: ``agents.<agent>.price``, else ``pricing.<model>``."""
        for agent in settings.served_agents:
            options = settings.agent_options(agent)
            by_model = settings.pricing.get(options.model)
            self._prices[agent] = options.price or (by_model.token_price if by_model else None)
        self._fits = FittedSchemas()
        self._examples = Examples()
        self._modes = modes
        self._windows = windows
        self._ledger = ledger
        self._log = call_log
        self._stats = stats
        self._observer = observer
        """Called with (agent, seconds) after each successful request (metrics)."""

    def mode(self, provider: ChatProvider, options: ResolvedAgentOptions) -> ModeState:
        """The structured-output mode of ``provider``'s requests with ``options`` now."""
        if options.response_format is not None:
            return ModeState("configured", "agents.<agent>.response_format is sent as is")
        if options.structured_output != "auto":
            return ModeState(
                options.structured_output,
                f"configured (structured_output: {options.structured_output})",
            )
        return self._modes.auto(provider.description, options.model)

    async def complete(self, call: Call) -> Completion:
        """Attempts of ``call`` until one is answered, fails, or the budget is spent."""
        budget = self._budget.max_attempts
        counted, last_error = 0, None
        while counted < budget:
            outcome = await self._attempt(call, counted + 1)
            if isinstance(outcome, Ok):
                return outcome.completion
            if isinstance(outcome, Fail):
                raise outcome.error from outcome.cause
            if outcome.counted:
                counted, last_error = counted + 1, outcome.error
            if outcome.delay is not None:
                await asyncio.sleep(outcome.delay)
        raise LLMTransientError(
            f"{call.agent}: {budget} attempts failed; last: {short(last_error)}"
        ) from last_error

    async def _attempt(self, call: Call, attempt: int) -> Attempt:
        """One request of ``call`` (its ``attempt``-th counted one)."""
        mode, request_format = self._request_format(call)
        call = self._shown_format(call, mode)
        record = self._record(call, attempt, mode)
        gate, reserved = self._gate(call)
        started = time.perf_counter()
        try:
            async with self._limits.slot(
                call.agent,
                call.provider.description,
                call.options.timeout,
                None if gate is None else lambda: self._pace(call, record, gate, reserved),
            ):
                started = time.perf_counter()
                completion = await call.provider.complete(
                    call.agent,
                    call.messages,
                    call.options,
                    request_format,
                )
        except Exception as exc:
            return self._failed(call, record, mode, attempt, exc, started, gate)
        elapsed = time.perf_counter() - started
        if gate is not None:
            if completion.prompt_tokens is not None or completion.completion_tokens is not None:
                used = (completion.prompt_tokens or 0) + (completion.completion_tokens or 0)
                gate.settle(reserved, used)
            if completion.rate_limit is not None:
                gate.observe(completion.rate_limit)
        return Ok(self._answered(call, record, completion, elapsed))

    def _gate(self, call: Call) -> tuple[Gate | None, int]:
        """The rate-limit gate of ``call``'s endpoint and model (None for the offline
        judge), and the tokens it takes there: the prompt's estimate (scaled as the
        endpoint was seen to count) plus ``max_tokens``, when the gate counts tokens."""
        if call.provider.offline:
            return None, 0
        description, model = call.provider.description, call.options.model
        gate = self.rate_limits.gate(description, model)
        if not gate.counts_tokens:
            return gate, 0
        prompt = estimate_messages(call.messages) / self._windows.scale(description, model)
        return gate, math.ceil(prompt) + (call.options.max_tokens or ANSWER_RESERVE_TOKENS)

    async def _pace(self, call: Call, record: CallRecord, gate: Gate, tokens: int) -> None:
        """Wait for ``call``'s turn at ``gate``; a wait is written in its call-log line,
        and logged from :data:`LOGGED_WAIT_SECONDS`."""
        seconds, kind = await self.rate_limits.pace(call.agent, gate, tokens)
        if kind is None:
            return
        record["rate_limit_wait_s"] = round(seconds, 3)
        if seconds >= LOGGED_WAIT_SECONDS:
            log.log(
                logging.INFO if self._log_waits else logging.DEBUG,
                "%s waited %.1f s for the rate limit of %s (%s, %s) (step %s)",
                call.agent,
                seconds,
                call.provider.description,
                call.options.model,
                kind,
                call.step,
            )

    def _request_format(self, call: Call) -> tuple[Mode, RequestFormat | None]:
        """The structured-output mode of the next request, and its ``response_format``."""
        if call.provider.offline:
            return "none", None
        options = call.options
        mode = self.mode(call.provider, options).mode
        if mode == "configured":
            return mode, options.response_format.root if options.response_format else None
        name, schema = call.output
        if mode == "json_schema" and options.max_tokens is not None:
            schema = self._fits.fitted(call.agent, name, schema, options.max_tokens)
        return mode, response_format(mode, name, schema)

    def _shown_format(self, call: Call, mode: Mode) -> Call:
        """``call`` with the reply's shape in its system message when ``mode`` sends no
        schema (``json_object``, ``none``) to an endpoint; else ``call`` as it is (the
        ``json_schema`` prompt is never changed)."""
        if mode not in SHOWN_MODES or call.provider.offline:
            return call
        example = (
            self._examples.of(call.output[1])
            if call.example is None
            else shown_example(call.example)
        )
        messages = with_instructions(call.messages, format_instructions(example))
        return dataclasses.replace(call, messages=messages)

    @staticmethod
    def _record(call: Call, attempt: int, mode: Mode) -> CallRecord:
        """The call-log line of an attempt, before its outcome."""
        record: CallRecord = {"time": time.time(), "agent": call.agent}
        if call.account:
            record["account"] = call.account
        record.update(
            {
                "model": call.options.model,
                "backend": call.provider.description,
                "step": call.step,
                "request_id": request_id_var.get(),
                "attempt": attempt,
                "reask": call.reask,
                "structured_output": mode,
            }
        )
        return record

    def _write(self, record: CallRecord, started: float, outcome: CallOutcome, error: str) -> None:
        record.update(
            {
                "latency_ms": round((time.perf_counter() - started) * 1000, 2),
                "outcome": outcome,
                "error": error,
            }
        )
        self._log.write(record)

    def _failed(
        self,
        call: Call,
        record: CallRecord,
        mode: Mode,
        attempt: int,
        exc: Exception,
        started: float,
        gate: Gate | None = None,
    ) -> Retry | Fail:
        """What a failed attempt means (the provider's :meth:`ChatProvider.failure`),
        logged, counted and learnt from (the rate limits told what its headers said)."""
        agent = call.agent
        usage = usage_of(None, time.perf_counter() - started, exc, self._prices.get(agent))
        self._ledger.record(call.ledger_agent, call.ledger_model, usage, call.step)
        failure = call.provider.failure(exc)
        if gate is not None and failure.rate_limit is not None:
            gate.observe(failure.rate_limit, refused=failure.rate_limited)
        if failure.kind == "oversize":
            # Not retried: the body is the model's answer, and it would write it again.
            self._write(record, started, "oversize", short(exc))
            self._stats[f"{agent}.oversize"] += 1
            log.warning("%s: %s (step %s)", agent, exc, call.step)
            error = f"{agent}: {exc} (agents.{agent}.max_response_bytes)"
            return Fail(LLMResponseTooLargeError(error), exc)
        if failure.refuses_format and self._falls_back(call, mode, exc):
            # Not a failed attempt: the endpoint told us what it cannot do, and the next
            # request asks for less.
            self._write(record, started, "format_refused", short(exc))
            self._stats[f"{agent}.format_fallbacks"] += 1
            return Retry(exc, counted=False)
        transient = failure.kind == "transient"
        retry_in = None
        if transient and attempt < self._budget.max_attempts:
            retry_in = self._backoff(attempt, failure)
            record["retry_in_s"] = round(retry_in, 3)
        outcome: CallOutcome = (
            "transient_error"
            if transient
            else "context_overflow"
            if failure.kind == "context_overflow"
            else "error"
        )
        self._write(record, started, outcome, f"{type(exc).__name__}: {short(exc)}")
        self._stats[f"{agent}.errors"] += 1
        if failure.kind == "context_overflow":
            self._learn_window(call, stated_prompt_tokens(str(exc)))
            return Fail(LLMContextOverflowError(f"{agent}: {short(exc)}"), exc)
        if not transient:
            return Fail(LLMUnavailableError(f"{agent}: {short(exc)}"), exc)
        return Retry(exc, retry_in)

    def _falls_back(self, call: Call, mode: Mode, exc: BaseException) -> bool:
        """Whether the refusal of ``mode`` moves the endpoint to a lesser mode (only under
        ``structured_output: auto``, and while one is left)."""
        if call.options.structured_output != "auto" or mode == "configured":
            return False
        description, model = call.provider.description, call.options.model
        return self._modes.fall_back(description, model, mode, short(exc))

    def _answered(
        self, call: Call, record: CallRecord, completion: Completion, elapsed: float
    ) -> Completion:
        """An answered attempt: its reasoning taken out of the answer, then logged,
        counted, and its prompt tokens learnt from."""
        completion = without_inline_reasoning(completion)
        self._log_answer(call, record, completion, elapsed)
        self._stats[f"{call.agent}.calls"] += 1
        usage = usage_of(completion, elapsed, price=self._prices.get(call.agent))
        self._ledger.record(call.ledger_agent, call.ledger_model, usage, call.step)
        if completion.prompt_tokens:
            self._learn_window(call, completion.prompt_tokens)
        if self._observer is not None:
            self._observer(call.agent, elapsed)
        return completion

    def _log_answer(
        self, call: Call, record: CallRecord, completion: Completion, elapsed: float
    ) -> None:
        record.update(
            {
                "latency_ms": round(elapsed * 1000, 2),
                "outcome": "ok",
                "finish_reason": completion.finish_reason,
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
                "reasoning_tokens": completion.reasoning_tokens,
                "cached_tokens": completion.cached_tokens,
            }
        )
        if completion.reasoning:
            # Logged, never parsed: the answer is the content alone.
            kept = completion.reasoning[:_LOGGED_REASONING_CHARS]
            record["reasoning_chars"] = len(completion.reasoning)
            record["reasoning"] = kept
            log.debug("%s reasoning (step %s): %s", call.agent, call.step, kept)
        self._log.write(record)

    def _learn_window(self, call: Call, counted: int | None) -> None:
        """Learn how the endpoint counts ``call``'s prompt: ``counted`` tokens (as it said)
        against the estimate of its messages."""
        if counted is not None:
            self._windows.observe(
                call.provider.description,
                call.options.model,
                estimate_messages(call.messages),
                counted,
            )

    def _backoff(self, attempt: int, failure: Failure) -> float:
        budget = self._budget
        ceiling = min(budget.backoff_max_seconds, budget.backoff_base_seconds * 2 ** (attempt - 1))
        if failure.retry_after is not None:
            return min(budget.backoff_max_seconds, failure.retry_after)
        return random.uniform(0, ceiling)
