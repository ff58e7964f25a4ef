"""A Prometheus counter family read from a process's counters, for ``GET /metrics``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily


def counted(
    name: str,
    documentation: str,
    label: str,
    keys: Iterable[str],
    counts: Mapping[str, int],
    prefix: str = "",
) -> CounterMetricFamily:
    """``name{label=key}``: ``counts[prefix + key]`` for each of ``keys``, 0 when absent
    (so that alerts can watch a key before it first happens)."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key in keys:
        family.add_metric([key], counts.get(f"{prefix}{key}", 0))
    return family
