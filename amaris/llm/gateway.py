"""The LLM gateway: concurrency limits, the one retry layer, JSON parsing and validation.

Attempt budget of one :meth:`LLMGateway.structured` call: up to
``gateway.max_attempts`` requests for transient failures (429, 5xx, timeouts,
connection errors), with capped exponential backoff and full jitter; then, if the
output does not validate, one corrective re-ask with its own ``max_attempts``.
At most ``2 * max_attempts`` requests, plus at most two at once when an endpoint refuses
a structured-output mode (``json_schema``, then ``json_object``; see
:mod:`amaris.llm.output_mode`): a refused mode is never asked again. Nothing else retries:
the SDK's own retries are off and callers do not retry. A reply longer than the agent's
``max_response_bytes`` is not retried (:class:`LLMResponseTooLargeError`).

One request is attempts of :class:`~amaris.llm.attempt.Requests`, each returning ``Ok``, ``Retry``
or ``Fail``: the limits are one context manager (:class:`~amaris.llm.limits.Limits`; the
endpoints' rate limits, :mod:`amaris.llm.rate_limits`, wait within it),
what a failure means is the provider's to say (:meth:`ChatProvider.failure`), and the call
log, the ledger, the context windows and the reasoning are each one step after it.

A reply is untrusted text: its body is bounded while it is read (:mod:`amaris.llm.transport`)
and its JSON read as :mod:`amaris.llm.json_reply` says.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from amaris.llm.attempt import Call, Requests
from amaris.llm.budget import ContextWindows, prompt_budget
from amaris.llm.call_log import CallLog
from amaris.llm.errors import (
    LLMContextOverflowError,
    LLMOutputError,
    LLMResponseTooLargeError,
    LLMTransientError,
    LLMTruncatedError,
    LLMUnavailableError,
    short,
)
from amaris.llm.json_reply import (
    INLINE_PARSE_CHARS,
    REPAIR_MAX_CHARS,
    parse_json_object,
    read_inline,
    read_reply,
    strict_json_object,
)
from amaris.llm.ledger import TokenLedger
from amaris.llm.output_mode import ModeState, OutputModes
from amaris.llm.providers import (
    ChatProvider,
    Completion,
    build_providers,
    is_context_overflow,
    is_transient,
)
from amaris.llm.rate_limits import RateLimits
from amaris.llm.reasoning import cut_short
from amaris.llm.schema import SchemaNode, strict_schema
from amaris.settings import ResolvedAgentOptions, Settings
from amaris.text.offload import off_loop

__all__ = [
    "INLINE_PARSE_CHARS",
    "REPAIR_MAX_CHARS",
    "LLMContextOverflowError",
    "LLMGateway",
    "LLMOutputError",
    "LLMResponseTooLargeError",
    "LLMTransientError",
    "LLMTruncatedError",
    "LLMUnavailableError",
    "build_providers",
    "is_context_overflow",
    "is_transient",
    "parse_json_object",
    "strict_json_object",
]

T = TypeVar("T", bound=BaseModel)
log = logging.getLogger("amaris.llm")

_REASK_ANSWER_CHARS = 4000
"""Characters of the invalid answer quoted back in the corrective re-ask."""


class LLMGateway:
    """Every agent's way to an LLM."""

    def __init__(
        self,
        settings: Settings,
        providers: dict[str, ChatProvider],
        call_log: CallLog | None = None,
        observer: Callable[[str, float], None] | None = None,
        output_modes: OutputModes | None = None,
        context_windows: ContextWindows | None = None,
        ledger: TokenLedger | None = None,
        step_wall_time: bool = False,
        rate_limits: RateLimits | None = None,
    ) -> None:
        self._settings = settings
        self.ledger = ledger or TokenLedger()
        """Tokens and time per agent and model (shared by the service's two gateways)."""
        self._step_wall_time = step_wall_time
        """Count each step's wall time with a call outstanding in the ledger (the step
        pipeline's gateway)."""
        self.output_modes = output_modes or OutputModes()
        """Structured-output modes per endpoint (shared by the service's two gateways)."""
        self.context_windows = context_windows or ContextWindows()
        """Context windows read from endpoints (shared by the service's two gateways)."""
        self._window_lock = asyncio.Lock()
        self._options: dict[str, ResolvedAgentOptions] = {
            agent: settings.agent_options(agent) for agent in settings.served_agents
        }
        """Each agent's resolved options (settings are frozen: resolved once, not per call)."""
        self._providers = providers
        self._log = call_log or CallLog(None)
        self.stats: Counter[str] = Counter()
        """Counters ``<agent>.<outcome>`` (calls, errors, invalid_output...) for metrics;
        tokens are in :attr:`ledger`."""
        self._requests = Requests(
            settings,
            providers,
            modes=self.output_modes,
            windows=self.context_windows,
            ledger=self.ledger,
            call_log=self._log,
            stats=self.stats,
            observer=observer,
            rate_limits=rate_limits,
            log_waits=step_wall_time,
        )
        self.rate_limits = self._requests.rate_limits
        """The endpoints' rate limits (shared by the service's two gateways)."""

    def provider(self, agent: str) -> ChatProvider:
        """The provider serving ``agent``."""
        return self._providers[agent]

    def _agent_options(self, agent: str) -> ResolvedAgentOptions:
        return self._options[agent]

    def output_mode(self, agent: str) -> ModeState:
        """The structured-output mode ``agent``'s requests are sent in now, and why."""
        provider = self._providers[agent]
        if provider.offline:
            return ModeState("none", "offline judge: no response_format is sent")
        return self._requests.mode(provider, self._agent_options(agent))

    async def context_window(self, agent: str) -> int | None:
        """``agent``'s context window in tokens: ``agents.<agent>.context_window``, else the
        ``max_model_len`` its endpoint lists (read once), else None (unknown)."""
        options = self._agent_options(agent)
        if options.context_window is not None:
            return options.context_window
        provider = self._providers[agent]
        if provider.offline:
            return None
        done, window = self.context_windows.cached(provider.description, options.model)
        if done:
            return window
        # One read per endpoint and model, however many calls arrive before it ends.
        async with self._window_lock:
            return await self.context_windows.read(
                provider.description, options.model, lambda: provider.models(options.timeout)
            )

    async def prompt_budget(self, agent: str) -> int | None:
        """Prompt tokens ``agent`` may send (its window less room for the answer); None
        when the window is unknown."""
        window = await self.context_window(agent)
        if window is None:
            return None
        options = self._agent_options(agent)
        scale = self.context_windows.scale(self._providers[agent].description, options.model)
        return int(prompt_budget(window, options.max_tokens) * scale)

    async def structured(
        self,
        agent: str,
        messages: list[dict[str, str]],
        schema: type[T],
        *,
        step: int | None = None,
        check: Callable[[T], None] | None = None,
        json_schema: SchemaNode | None = None,
        example: BaseModel | None = None,
    ) -> T:
        """One structured call: returns output validated by ``schema`` (and ``check``).

        See :meth:`structured_completion`.
        """
        result, _ = await self.structured_completion(
            agent,
            messages,
            schema,
            step=step,
            check=check,
            json_schema=json_schema,
            example=example,
        )
        return result

    async def structured_completion(
        self,
        agent: str,
        messages: list[dict[str, str]],
        schema: type[T],
        *,
        step: int | None = None,
        check: Callable[[T], None] | None = None,
        json_schema: SchemaNode | None = None,
        account: str | None = None,
        example: BaseModel | None = None,
    ) -> tuple[T, Completion]:
        """One structured call: the output validated by ``schema`` (and ``check``), and the
        completion it was read from (its token logprobs, when asked for).

        The request asks for ``json_schema`` (default: ``schema``'s strict JSON schema) in
        the agent's structured-output mode. ``account``: the ledger agent its usage is
        counted under (default ``agent``), e.g. ``canary`` for the rubric canary's scorer
        calls, so a step's table tells them from its rollouts' own. ``example``: one reply
        of the expected shape, shown to the model in the modes that send no schema
        (``json_object``, ``none``; :mod:`amaris.llm.reply_format`); by default one made
        from the schema.

        Raises:
            LLMUnavailableError: transient failures outlasted the budget, or a permanent error.
            LLMOutputError: invalid output after the corrective re-ask.
        """
        output = (
            schema.__name__,
            json_schema if json_schema is not None else strict_schema(schema),
        )
        call = self._call(agent, messages, step, output, account, example, reask=False)
        while True:
            completion = await self._waited(call)
            answer = self._answer(agent, completion, step)
            try:
                return await self._validated(agent, answer, schema, check, step), completion
            except (ValueError, ValidationError) as exc:
                if call.reask:
                    error = f"{agent}: invalid output after re-ask: {short(exc)}"
                    raise LLMOutputError(error) from exc
                if not self._settings.gateway.reask_on_invalid:
                    raise LLMOutputError(f"{agent}: invalid output: {short(exc)}") from exc
                retry = _reask(messages, answer, exc)
                call = self._call(agent, retry, step, output, account, example, reask=True)

    def _call(
        self,
        agent: str,
        messages: list[dict[str, str]],
        step: int | None,
        output: tuple[str, SchemaNode],
        account: str | None,
        example: BaseModel | None,
        reask: bool,
    ) -> Call:
        provider, options = self._providers[agent], self._agent_options(agent)
        return Call(agent, account, messages, step, output, reask, provider, options, example)

    def _answer(self, agent: str, completion: Completion, step: int | None) -> str:
        """The answer of ``completion`` (its reasoning already taken out).

        Raises:
            LLMTruncatedError: cut by ``max_tokens``, or reasoning and no answer.
        """
        why = cut_short(completion)
        if why is not None:
            self.stats[f"{agent}.truncated"] += 1
            log.warning("%s: reply %s (step %s)", agent, why, step)
            raise LLMTruncatedError(
                f"{agent}: reply {why}; {len(completion.content)} answer characters "
                f"after {len(completion.reasoning or '')} of reasoning"
            )
        return completion.content

    async def _validated(
        self,
        agent: str,
        answer: str,
        schema: type[T],
        check: Callable[[T], None] | None,
        step: int | None,
    ) -> T:
        """:meth:`_validate`, on the event loop for a short answer that is JSON
        (:func:`~amaris.llm.json_reply.read_inline`), else in a worker thread (a long
        answer's parse, any repair): amaris's text thread."""
        with self._invalid_counted(agent, step):
            inline = read_inline(answer, schema, check)
        if inline is not None:
            return inline[0]  # strict JSON: never repaired
        return await off_loop(self._validate, agent, answer, schema, check, step)

    @contextmanager
    def _invalid_counted(self, agent: str, step: int | None) -> Iterator[None]:
        """An invalid output raised within (``ValueError``, ``ValidationError``) counted
        and logged, then raised on."""
        try:
            yield
        except (ValueError, ValidationError) as exc:
            self.stats[f"{agent}.invalid_output"] += 1
            log.warning("%s: invalid output (step %s): %s", agent, step, short(exc))
            raise

    def _validate(
        self,
        agent: str,
        answer: str,
        schema: type[T],
        check: Callable[[T], None] | None,
        step: int | None,
    ) -> T:
        """:func:`~amaris.llm.json_reply.read_reply`, counted and logged."""
        with self._invalid_counted(agent, step):
            result, repaired = read_reply(answer, schema, check)
        if repaired:
            self.stats[f"{agent}.repaired_json"] += 1
        return result

    async def _waited(self, call: Call) -> Completion:
        """:meth:`Requests.complete`, its wall time counted as the step's in the ledger
        (:meth:`TokenLedger.outstanding`) when this gateway measures steps."""
        with (
            self.ledger.outstanding(call.step)
            if self._step_wall_time and call.step is not None
            else nullcontext()
        ):
            return await self._requests.complete(call)

    async def close(self) -> None:
        """Close provider connections and flush the call log."""
        seen: set[int] = set()
        for provider in self._providers.values():
            if id(provider) not in seen:
                seen.add(id(provider))
                await provider.close()
        self._log.close()


def _reask(messages: list[dict[str, str]], answer: str, invalid: Exception) -> list[dict[str, str]]:
    """``messages`` followed by the invalid ``answer`` and the corrective re-ask."""
    return [
        *messages,
        {"role": "assistant", "content": answer[:_REASK_ANSWER_CHARS]},
        {
            "role": "user",
            "content": (
                f"Your reply was invalid: {short(invalid)}. Reply again with only the "
                "JSON object in the required format."
            ),
        },
    ]
