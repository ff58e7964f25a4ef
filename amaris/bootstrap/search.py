"""Pairwise accuracy of a rubric's rewards, and the seeded search over adaptive criteria.

A rubric here is the configured anchors plus a *genome*: some criteria of a candidate pool,
each with a weight. Every response was judged once on the whole pool (anchors first), so a
genome's reward for a response is :func:`amaris.rubric.aggregate.aggregate` of its
criteria's weights and verdicts: the formula ``/score`` uses, on the verdicts it would get.

Accuracy counts a pair right when the better response gets the higher reward, half right
on a tie; the top tail is the pairs whose better response is its prompt's best.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from amaris.bootstrap.data import Pair
from amaris.rubric.aggregate import aggregate

Key = tuple[str, str]
"""A response: (prompt id, candidate id)."""

WEIGHT_FACTORS = (0.5, 2.0)
"""What a reweighting mutation multiplies a weight by."""


@dataclass(frozen=True)
class Accuracy:
    """How well rewards order a set of pairs (None: no such pair)."""

    pairs: int
    accuracy: float | None
    top_pairs: int
    top_accuracy: float | None
    ties: int


def _share(points: Sequence[float]) -> float | None:
    return sum(points) / len(points) if points else None


def pairwise_accuracy(rewards: Mapping[Key, float], pairs: Sequence[Pair]) -> Accuracy:
    """The share of ``pairs`` whose better response has the higher reward (a tie counts
    half), overall and on the top tail. Every response of ``pairs`` must have a reward."""
    points: list[float] = []
    top: list[float] = []
    ties = 0
    for pair in pairs:
        better = rewards[(pair.prompt_id, pair.better)]
        worse = rewards[(pair.prompt_id, pair.worse)]
        point = 1.0 if better > worse else 0.5 if better == worse else 0.0
        ties += better == worse
        points.append(point)
        if pair.top:
            top.append(point)
    return Accuracy(len(points), _share(points), len(top), _share(top), ties)


@dataclass(frozen=True)
class Gene:
    """One adaptive criterion of a genome: its index in the pool and its weight."""

    index: int
    weight: float


Genome = tuple[Gene, ...]


@dataclass(frozen=True)
class SearchSpace:
    """What the search may build, and the verdicts it scores with."""

    anchor_weights: tuple[float, ...]
    signs: tuple[int, ...]
    """Per pool criterion: +1 a requirement, -1 a pitfall."""
    verdicts: Mapping[Key, tuple[float, ...]]
    """Per response: verdicts on the anchors, then on every pool criterion."""
    min_weight: float
    max_weight: float
    max_adaptive: int

    def rewards(self, genome: Genome) -> dict[Key, float]:
        """Each response's reward under the anchors plus ``genome``."""
        anchors = len(self.anchor_weights)
        weights = [*self.anchor_weights, *(g.weight for g in genome)]
        return {
            key: aggregate(weights, [*v[:anchors], *(v[anchors + g.index] for g in genome)])
            for key, v in self.verdicts.items()
        }

    def valid(self, genome: Genome) -> bool:
        """Within the bounds, no criterion twice, and some criterion with a positive weight."""
        indices = [g.index for g in genome]
        return (
            len(genome) <= self.max_adaptive
            and len(set(indices)) == len(indices)
            and all(
                g.weight != 0 and self.min_weight <= g.weight <= self.max_weight for g in genome
            )
            and any(w > 0 for w in [*self.anchor_weights, *(g.weight for g in genome)])
        )

    def _clamp(self, weight: float) -> float:
        return min(self.max_weight, max(self.min_weight, weight))

    def mutate(self, genome: Genome, rng: random.Random) -> Genome:
        """One random edit: add, retire, reweight or swap a criterion (may be invalid)."""
        unused = [i for i in range(len(self.signs)) if i not in {g.index for g in genome}]
        moves = ["add"] * bool(unused) + ["retire", "reweight", "swap"] * bool(genome)
        move = rng.choice(moves) if moves else "none"
        if move == "add":
            index = rng.choice(unused)
            return (*genome, Gene(index, self._clamp(float(self.signs[index]))))
        if move == "none":
            return genome
        at = rng.randrange(len(genome))
        gene = genome[at]
        if move == "retire":
            return genome[:at] + genome[at + 1 :]
        if move == "reweight":
            changed = Gene(gene.index, self._clamp(gene.weight * rng.choice(WEIGHT_FACTORS)))
        elif unused:
            index = rng.choice(unused)
            changed = Gene(index, self._clamp(self.signs[index] * abs(gene.weight)))
        else:
            return genome
        return (*genome[:at], changed, *genome[at + 1 :])


def evolve(
    space: SearchSpace,
    initial: Genome,
    pairs: Sequence[Pair],
    *,
    seed: int,
    generations: int,
    population: int,
) -> Genome:
    """The genome whose rewards order ``pairs`` best, from a seeded search: each generation
    mutates parents picked by tournament, then keeps the ``population`` best of parents and
    children (so the best never gets worse). Fitness: accuracy, then top-tail accuracy,
    then fewer criteria; ``initial`` takes part, so the result is at least as fit."""
    rng = random.Random(seed)
    scores: dict[Genome, tuple[float, float, int]] = {}

    def fitness(genome: Genome) -> tuple[float, float, int]:
        if genome not in scores:
            acc = pairwise_accuracy(space.rewards(genome), pairs)
            scores[genome] = (acc.accuracy or 0.0, acc.top_accuracy or 0.0, -len(genome))
        return scores[genome]

    def child_of(parent: Genome) -> Genome:
        child = parent
        for _ in range(rng.choice((1, 2))):
            child = space.mutate(child, rng)
        return child if space.valid(child) else parent

    pool = [initial]
    for _ in range(population - 1):
        pool.append(child_of(initial))
    pool = sorted(dict.fromkeys(pool), key=fitness, reverse=True)[:population]
    for _ in range(generations):
        children = []
        for _ in range(population):
            a, b = rng.choice(pool), rng.choice(pool)
            children.append(child_of(max(a, b, key=fitness)))
        # Stable sort: among equally fit genomes the older one stays first.
        pool = sorted(dict.fromkeys([*pool, *children]), key=fitness, reverse=True)[:population]
    return pool[0]
