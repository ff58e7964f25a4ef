"""The server's token ledger as the simulator sees it: read from ``GET /metrics``.

The driver reads the ledger's counters before a step is scored and after its pipeline
has finished; the difference is what the step cost (its scorer and pipeline calls), as
long as nothing else uses the server meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from prometheus_client.parser import text_string_to_metric_families

from amaris.llm.ledger import Key, Usage, cost, total
from amaris.settings import ModelPrice

_FIELDS = {
    "amaris_llm_model_calls_total": "calls",
    "amaris_llm_model_failed_total": "failed",
    "amaris_llm_wait_seconds_total": "seconds",
}


def ledger_from_metrics(text: str) -> dict[Key, Usage]:
    """The ``amaris_llm_*{agent, model}`` ledger counters of a ``/metrics`` page, with the
    dollars the server counted at each agent's price (``amaris_llm_cost_dollars_total``:
    an agent and model without it had no price)."""
    table: dict[Key, Usage] = {}
    priced: set[Key] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "amaris_llm_tokens_total":
                name = f"{labels['kind']}_tokens"
            elif sample.name == "amaris_llm_cost_dollars_total":
                name = "cost_usd"
            elif sample.name in _FIELDS:
                name = _FIELDS[sample.name]
            else:
                continue
            key = (labels["agent"], labels["model"])
            usage = table.setdefault(key, Usage())
            value = sample.value if name in ("seconds", "cost_usd") else int(sample.value)
            setattr(usage, name, value)
            if name == "cost_usd":
                priced.add(key)
    for key, usage in table.items():
        # Every request of an agent and model is priced, or none is (its price is fixed).
        if key in priced:
            usage.priced = usage.calls + usage.failed
        elif usage.tokens:
            usage.unpriced = usage.calls
    return table


def difference(after: Mapping[Key, Usage], before: Mapping[Key, Usage]) -> dict[Key, Usage]:
    """``after - before``, for the keys that changed."""
    changed: dict[Key, Usage] = {}
    for key, now in after.items():
        then = before.get(key, Usage())
        delta = Usage(**{name: getattr(now, name) - getattr(then, name) for name in vars(now)})
        if delta.calls or delta.failed:
            changed[key] = delta
    return changed


class UsageSummary(TypedDict):
    """JSON-ready totals of a ledger (:func:`usage_summary`): the :class:`Usage` counters,
    seconds rounded, and cost in dollars when every model is priced."""

    calls: int
    failed: int
    timed_out: int
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cached_tokens: int
    seconds: float
    cost: float | None
    cost_per_1000_rollouts: float | None


def usage_summary(
    table: Mapping[Key, Usage], rollouts: int, pricing: Mapping[str, ModelPrice]
) -> UsageSummary:
    """JSON-ready totals of ``table``, with cost and cost per 1,000 rollouts when priced."""
    summed = total(table.values())
    dollars = cost(table, pricing)
    return {
        "calls": summed.calls,
        "failed": summed.failed,
        "timed_out": summed.timed_out,
        "prompt_tokens": summed.prompt_tokens,
        "completion_tokens": summed.completion_tokens,
        "reasoning_tokens": summed.reasoning_tokens,
        "cached_tokens": summed.cached_tokens,
        "seconds": round(summed.seconds, 3),
        "cost": None if dollars is None else round(dollars, 6),
        "cost_per_1000_rollouts": (
            None if dollars is None or not rollouts else round(dollars / rollouts * 1000, 6)
        ),
    }
