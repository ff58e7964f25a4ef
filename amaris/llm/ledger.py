"""The token and cost ledger: what every LLM request cost, per agent and model.

The gateway records every request it sends; everything else reads:

- ``ledger.totals()``: ``{(agent, model): Usage}`` since the process started
  (``/metrics`` exports it as ``amaris_llm_*{agent, model}`` counters);
- ``ledger.for_step(step)``: the same, for the requests made with ``step=step`` (a
  step's scorer calls and its pipeline agents' calls, when they ran in this process),
  kept for the last :data:`STEPS_KEPT` steps;
- :func:`total` sums a table; :func:`cost` says what it cost in dollars.

Each request is priced as it is recorded, at its agent's price: ``agents.<agent>.price``,
else ``pricing.<model>`` (the gateway knows the agent, also when its usage is counted
under another name, as the canaries' scorer calls are).

A :class:`Usage` counts requests answered (``calls``) and failed (``failed``: errors,
timeouts, refused formats; ``timed_out`` of them timed out), the tokens the endpoint
reported in ``usage`` (``prompt``, ``completion``, ``reasoning`` and ``cached``; a
response without ``usage`` counts as a call with no tokens), and ``seconds``: the time
spent waiting on the endpoint, answered or failed requests alike (not the time queued
behind amaris's own concurrency limits, nor retry backoff), summed over requests:
concurrent requests each count theirs, so it can exceed the wall time. OpenAI's
accounting: reasoning tokens are part of the completion tokens, cached tokens part of the
prompt tokens.

Per step the ledger also keeps the wall time during which at least one of the step's calls
was outstanding (:meth:`TokenLedger.outstanding`, :meth:`TokenLedger.waited`): a call from
asking for a concurrency slot to its answer or its last failure, the gateway's retries and
backoff included. The step pipeline's gateway measures it, so a step that took an hour
because its judge was slow says so in its run. The ledger is thread-safe (the scorer's
gateway and the pipeline's run on different threads); its tables are copies.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields

import openai

from amaris.llm.providers import Completion
from amaris.settings import ModelPrice, TokenPrice

STEPS_KEPT = 1024
"""Steps whose own table the ledger keeps (the most recently used)."""

OFFLINE_MODEL = "offline"
"""The model label of the built-in offline judge's calls (it is no configured model)."""

Key = tuple[str, str]
"""(agent, model)."""


@dataclass
class Usage:
    """LLM requests and tokens of one (agent, model), one step or a whole run."""

    calls: int = 0
    """Requests answered."""
    failed: int = 0
    """Requests that got no answer (error, timeout, refused response_format)."""
    timed_out: int = 0
    """Failed requests that timed out (part of ``failed``)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    """Reasoning tokens included."""
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens the provider served from its prefix cache (part of prompt_tokens)."""
    seconds: float = 0.0
    """Time spent waiting on the endpoint."""
    cost_usd: float = 0.0
    """Dollars of the requests counted at a price."""
    priced: int = 0
    """Requests counted at a price (answered or failed)."""
    unpriced: int = 0
    """Requests answered with tokens and no price: their cost is unknown."""

    def add(self, other: Usage) -> None:
        """Add ``other``'s counts to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


def usage_of(
    completion: Completion | None,
    seconds: float,
    error: BaseException | None = None,
    price: TokenPrice | None = None,
) -> Usage:
    """One request as a :class:`Usage`: ``completion`` None means it failed (with
    ``error``); priced at ``price`` when there is one."""
    if completion is None:
        usage = Usage(failed=1, timed_out=int(timed_out(error)), seconds=seconds)
    else:
        usage = Usage(
            calls=1,
            prompt_tokens=completion.prompt_tokens or 0,
            completion_tokens=completion.completion_tokens or 0,
            reasoning_tokens=completion.reasoning_tokens or 0,
            cached_tokens=completion.cached_tokens or 0,
            seconds=seconds,
        )
    if price is not None:
        usage.cost_usd, usage.priced = dollars(usage, price), 1
    elif usage.tokens:
        usage.unpriced = 1
    return usage


def timed_out(error: BaseException | None) -> bool:
    """``error``, or an error it was raised from, is a timeout."""
    while error is not None:
        if isinstance(error, openai.APITimeoutError | TimeoutError):
            return True
        error = error.__cause__
    return False


@dataclass
class _Outstanding:
    calls: int = 0
    since: float = 0.0
    seconds: float = 0.0


class TokenLedger:
    """Usage per (agent, model), in total and per step. One per process, shared by the
    scoring and the pipeline gateways."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[Key, Usage] = {}
        self._steps: OrderedDict[int, dict[Key, Usage]] = OrderedDict()
        self._waits: OrderedDict[int, _Outstanding] = OrderedDict()

    def record(self, agent: str, model: str, usage: Usage, step: int | None = None) -> None:
        """Count one request of ``agent`` to ``model`` (see :func:`usage_of`)."""
        key = (agent, model)
        with self._lock:
            self._totals.setdefault(key, Usage()).add(usage)
            if step is None:
                return
            table = self._steps.get(step)
            if table is None:
                table = self._steps[step] = {}
                while len(self._steps) > STEPS_KEPT:
                    self._steps.popitem(last=False)
            else:
                self._steps.move_to_end(step)
            table.setdefault(key, Usage()).add(usage)

    def totals(self) -> dict[Key, Usage]:
        """Usage since the process started, by (agent, model)."""
        with self._lock:
            return _copy(self._totals)

    def for_step(self, step: int) -> dict[Key, Usage]:
        """Usage of the requests made for ``step`` in this process, by (agent, model)."""
        with self._lock:
            return _copy(self._steps.get(step, {}))

    @contextmanager
    def outstanding(self, step: int) -> Iterator[None]:
        """Count the wall time of the block as ``step``'s time with a call outstanding
        (overlapping blocks of one step count once)."""
        with self._lock:
            wait = self._waits.get(step)
            if wait is None:
                wait = self._waits[step] = _Outstanding()
                while len(self._waits) > STEPS_KEPT:
                    self._waits.popitem(last=False)
            if wait.calls == 0:
                wait.since = time.perf_counter()
            wait.calls += 1
        try:
            yield
        finally:
            with self._lock:
                wait.calls -= 1
                if wait.calls == 0:
                    wait.seconds += time.perf_counter() - wait.since

    def waited(self, step: int) -> float:
        """Seconds of wall time during which at least one of ``step``'s measured calls
        (:meth:`outstanding`) was outstanding, those still running included."""
        with self._lock:
            wait = self._waits.get(step)
            if wait is None:
                return 0.0
            running = time.perf_counter() - wait.since if wait.calls else 0.0
            return wait.seconds + running


def _copy(table: Mapping[Key, Usage]) -> dict[Key, Usage]:
    copies: dict[Key, Usage] = {}
    for key, usage in table.items():
        copies[key] = Usage()
        copies[key].add(usage)
    return copies


def total(usages: Iterable[Usage]) -> Usage:
    """The sum of ``usages``."""
    result = Usage()
    for usage in usages:
        result.add(usage)
    return result


def dollars(usage: Usage, rate: TokenPrice | ModelPrice) -> float:
    """Dollars of ``usage``'s tokens at ``rate`` ($ per million tokens; cached prompt tokens
    at their own price, or at the input price when that is not set)."""
    if isinstance(rate, ModelPrice):
        rate = rate.token_price
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    cached_rate = (
        rate.input_per_mtok if rate.cached_input_per_mtok is None else rate.cached_input_per_mtok
    )
    return (
        (usage.prompt_tokens - cached) * rate.input_per_mtok
        + cached * cached_rate
        + usage.completion_tokens * rate.output_per_mtok
    ) / 1_000_000


def cost(
    table: Mapping[Key, Usage], pricing: Mapping[str, ModelPrice] | None = None
) -> float | None:
    """Dollars of a table: each (agent, model) at the price it was recorded with, else at
    ``pricing[model]``; None when one that used tokens has neither, or when nothing is
    priced at all (no price configured: no cost is shown)."""
    spent, priced = 0.0, bool(pricing)
    for (_, model), usage in table.items():
        if usage.priced and not usage.unpriced:
            spent, priced = spent + usage.cost_usd, True
            continue
        if not usage.tokens:
            continue
        rate = pricing.get(model) if pricing else None
        if rate is None:
            return None
        spent += dollars(usage, rate)
    return spent if priced else None


def unpriced(
    table: Mapping[Key, Usage], pricing: Mapping[str, ModelPrice] | None = None
) -> list[str]:
    """``agent`` (``model``) of each entry of ``table`` that used tokens with no price,
    sorted."""
    return sorted(
        f"{agent} ({model})"
        for (agent, model), usage in table.items()
        if usage.tokens
        and not (usage.priced and not usage.unpriced)
        and model not in (pricing or {})
    )
