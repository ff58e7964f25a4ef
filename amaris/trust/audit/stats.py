"""The alarm's statistics: how surprising a count of disagreements is under the rate the
two judges disagree at in a steady run.

An honest auditor disagrees with the training judge now and then (another model reads a
borderline criterion otherwise); with a few rollouts audited a step, one such read moves
the step's figures as much as a drift would. So each alarm asks a one-sided binomial
question: were ``k`` or more of ``n`` audited items read against the training judge
likely, at the rate the run's history shows (:func:`steady_rate`)? It fires only when
that chance is at most ``audit.false_alarm_rate``: a steady run raises it on a step with
at most that probability (up to the rate's estimation; docs/fidelity.md).

Pure functions on small counts (exact sums, no statistics dependency)."""

from __future__ import annotations

import math


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= ``k``) for X ~ Binomial(``n``, ``p``): the chance of ``k`` or more
    disagreements among ``n`` items each disagreeing with probability ``p``."""
    if n < 0 or not 0 <= p <= 1:
        raise ValueError(f"binomial_tail needs n >= 0 and p in [0, 1], not n={n}, p={p}")
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    tail = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))
    return min(1.0, tail)


def steady_rate(disagreed: int, items: int, prior: float, weight: float) -> float:
    """The rate at which items disagree in a steady run, as the history shows it:
    ``disagreed`` of ``items`` seen, shrunk towards ``prior`` as if ``weight`` items had
    been seen at that rate (the mean of a Beta posterior). A short history leans on the
    prior; a long one on what was seen; no history gives the prior."""
    if disagreed < 0 or items < disagreed or weight <= 0:
        raise ValueError("steady_rate needs 0 <= disagreed <= items and weight > 0")
    return (disagreed + prior * weight) / (items + weight)
