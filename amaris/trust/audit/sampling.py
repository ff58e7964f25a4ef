"""Which of a step's scored rollouts the auditor re-grades: a sample stratified by training
reward, the top tail over-sampled (over-optimisation shows there first), its size within
the audit's budget.

The top tail holds every rollout rewarded at least as well as the tail's lowest ranked one
(ties at the threshold are in: which of many equally rewarded rollouts ranks higher would
otherwise depend on their arrival order), and its longest reply is drawn first: length is
the best documented bias of LLM judges, and a padded reply the training judge pays is
where a lenient judge shows in a small sample.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

STRATA = 4
"""Equal quantile bins of the rollouts below the top tail, sampled evenly."""


@dataclass(frozen=True)
class Drawn(Generic[T]):
    """One sampled item, whether it came from the top tail, and the training reward from
    which an item is in the top tail."""

    item: T
    top_tail: bool
    threshold: float


def sample_size(population: int, share: float, min_samples: int, budget: int | None = None) -> int:
    """How many of ``population`` rollouts to re-grade: ``share`` of them (rounded up), at
    least ``min_samples``, at most all, and at most ``budget`` (None: no cap)."""
    size = min(population, max(min_samples, math.ceil(share * population)))
    return size if budget is None else max(0, min(size, budget))


def budget_left(
    max_share: float | None, population: int, earlier: Sequence[tuple[int, int]]
) -> int | None:
    """Auditor calls a step of ``population`` judged rollouts may make so that the run's
    calls stay within ``max_share`` of its judged rollouts: ``earlier`` holds each earlier
    audited step's (judged rollouts, rollouts re-graded). What a step leaves unspent (a
    fraction of a call) is carried to the next. None when ``max_share`` is None (no cap)."""
    if max_share is None:
        return None
    allowed = max_share * (population + sum(p for p, _ in earlier))
    spent = sum(s for _, s in earlier)
    return max(0, math.floor(allowed - spent + 1e-9))


def _split(total: int, sizes: Sequence[int]) -> list[int]:
    """``total`` spread evenly over bins of ``sizes`` (none over its size; what a full bin
    cannot take goes to the others)."""
    counts = [0] * len(sizes)
    left = min(total, sum(sizes))
    while left > 0:
        open_bins = [i for i, size in enumerate(sizes) if counts[i] < size]
        each, extra = divmod(left, len(open_bins))
        for rank, i in enumerate(open_bins):
            take = min(sizes[i] - counts[i], each + (1 if rank < extra else 0))
            counts[i] += take
            left -= take
    return counts


def stratified_sample(
    items: Sequence[T],
    reward: Callable[[T], float],
    key: Callable[[T], str],
    size: int,
    *,
    top_tail: float,
    top_tail_share: float,
    seed: str,
    length: Callable[[T], int] | None = None,
) -> list[Drawn[T]]:
    """``size`` of ``items``: ``top_tail_share`` of them from the top ``top_tail`` of the
    items by ``reward``, the rest spread over :data:`STRATA` quantile bins below it. Within
    a bin the draw is random, seeded by ``seed`` (a step's sample is the same on a re-run),
    except that the top tail's longest item by ``length`` (when given) is drawn first.
    The top tail takes in every item rewarded as well as its lowest ranked one. ``key``
    identifies an item and orders items of equal reward (it must not depend on arrival
    order). In the order the items came."""
    if size <= 0 or not items:
        return []
    ranked = sorted(items, key=lambda item: (reward(item), key(item)))
    tail_count = max(1, math.ceil(top_tail * len(ranked)))
    threshold = reward(ranked[len(ranked) - tail_count])
    cut = next(i for i, item in enumerate(ranked) if reward(item) >= threshold)
    below, tail = ranked[:cut], ranked[cut:]
    size = min(size, len(ranked))
    want_tail = min(len(tail), max(1, round(size * top_tail_share)))
    want_below = min(len(below), size - want_tail)
    want_tail = min(len(tail), size - want_below)
    bins = [below[i * len(below) // STRATA : (i + 1) * len(below) // STRATA] for i in range(STRATA)]
    rng = random.Random(seed)
    first: list[T] = []
    if length is not None and want_tail:
        longest = max(tail, key=lambda item: (length(item), key(item)))
        first, tail = [longest], [item for item in tail if key(item) != key(longest)]
    chosen: list[T] = first + rng.sample(tail, want_tail - len(first))
    tail_ids = {key(item) for item in chosen}
    for part, count in zip(bins, _split(want_below, [len(b) for b in bins]), strict=True):
        chosen.extend(rng.sample(part, count))
    picked = {key(item) for item in chosen}
    return [Drawn(item, key(item) in tail_ids, threshold) for item in items if key(item) in picked]
