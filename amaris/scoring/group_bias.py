"""The position-bias check of listwise judging: does a rollout's reward depend on where it
was shown in its group's call?

The order is shuffled per group, so a rollout's quality is independent of its position and
the mean of (reward - its group's mean reward) at every position should stay near 0. A
judge that favours the first (or last) response moves it. :class:`PositionBias` keeps that
mean per shown position; the largest, in thousandths, is ``group.position_bias_milli`` in
``/healthz`` ``counters`` and per position ``amaris_group_position_bias`` in ``/metrics``
(:func:`group_metrics`);
past ``scoring.group_bias_bound`` after :data:`MIN_GROUPS` groups a warning is logged.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from amaris.metric_families import counted

log = logging.getLogger("amaris.scoring.group")

MIN_GROUPS = 50
"""Groups judged in one call before the bias is checked against its bound (and again every
as many groups after)."""


class PositionBias:
    """The mean reward excess at each shown position, over the groups judged in one call."""

    def __init__(self, bound: float, counters: Counter[str]) -> None:
        self._bound = bound
        self._counters = counters
        self._shown: list[int] = []
        self._excess: list[float] = []
        self.groups = 0
        """Groups added."""

    def add(self, rewards: Sequence[float]) -> None:
        """One group's rewards, by shown position (first shown first)."""
        if len(rewards) < 2:
            return
        mean = sum(rewards) / len(rewards)
        while len(self._shown) < len(rewards):
            self._shown.append(0)
            self._excess.append(0.0)
        for position, reward in enumerate(rewards):
            self._shown[position] += 1
            self._excess[position] += reward - mean
        self.groups += 1
        worst = self.worst()
        self._counters["group.bias_groups"] = self.groups
        self._counters["group.position_bias_milli"] = round(1000 * worst)
        if self.groups % MIN_GROUPS == 0 and worst > self._bound:
            log.warning(
                "listwise judging: the mean reward at a shown position departs from its "
                "group's mean by %.3f over %d groups (scoring.group_bias_bound %.3f); by "
                "position: %s. The judge may favour a place in the list: consider "
                "scoring.group_mode pointwise",
                worst,
                self.groups,
                self._bound,
                ", ".join(f"{p + 1}: {m:+.3f}" for p, m in self.means().items()),
            )

    def means(self) -> dict[int, float]:
        """Per shown position (0 = first), the mean of reward minus its group's mean."""
        return {p: self._excess[p] / n for p, n in enumerate(self._shown) if n}

    def worst(self) -> float:
        """The largest departure from 0 of :meth:`means`, at positions shown in at least
        half of the groups (a position only large groups reach says little)."""
        enough = [
            abs(self._excess[p] / n)
            for p, n in enumerate(self._shown)
            if n and 2 * n >= self.groups
        ]
        return max(enough, default=0.0)


GROUP_OUTCOMES = ("calls", "rollouts", "fallback", "split")
"""The listwise counters exported by ``amaris_group_judging`` (``group.<outcome>``)."""


def group_metrics(counters: Mapping[str, int], bias: PositionBias | None) -> Iterable[Metric]:
    """When listwise is on: ``amaris_group_judging{outcome}`` and
    ``amaris_group_position_bias{position}`` (1 = first shown)."""
    if bias is None:
        return
    yield counted(
        "amaris_group_judging",
        "Listwise judging: calls made, rollouts they decided, rollouts judged on their own "
        "after their group's call failed for them (fallback), parts split to fit the budget.",
        "outcome",
        GROUP_OUTCOMES,
        counters,
        "group.",
    )
    gauge = GaugeMetricFamily(
        "amaris_group_position_bias",
        "Listwise judging: mean of a rollout's reward minus its group's mean, by the position "
        "it was shown at (1 = first); near 0 when the judge ignores the order.",
        labels=["position"],
    )
    for position, mean in bias.means().items():
        gauge.add_metric([str(position + 1)], mean)
    yield gauge
