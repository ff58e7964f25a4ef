"""A reward per objective beside the scalar one, for trainers that optimise several rewards
(verl's GDPO ``algorithm.gdpo_reward_keys``, TRL's reward function per objective, NeMo's
reward vectors). Computed by amaris from the same verdicts as the scalar.

Keys: each criterion id of the rubric version used (``A1``, ``R3``; ids match
``^[AR][0-9]+$``, so none is a fixed key) and two fixed keys. Every value is in [0, 1],
higher is better:

* a requirement (weight > 0): its normalised verdict ``s``;
* a pitfall (weight < 0): ``1 - s``, how far the pitfall was avoided;
* ``anchors``: :func:`~amaris.rubric.aggregate.aggregate` over the anchor criteria alone;
* ``adaptive``: the same over the adaptive criteria alone.

``anchors`` or ``adaptive`` is None when the rubric has no criterion of that kind.
"""

from __future__ import annotations

from collections.abc import Sequence

from amaris.models import CriterionResult, RewardVector
from amaris.rubric.aggregate import aggregate, normalise
from amaris.rubric.model import RubricVersion

ANCHORS = "anchors"
"""The key of the reward from the anchor criteria alone."""
ADAPTIVE = "adaptive"
"""The key of the reward from the adaptive criteria alone."""


def criterion_reward(weight: float, verdict: float) -> float:
    """One criterion's value: its normalised verdict, or for a pitfall how far it was
    avoided (``1 -`` its normalised presence)."""
    share = normalise(verdict)
    return share if weight > 0 else 1.0 - share


def sub_reward(verdicts: Sequence[CriterionResult]) -> float | None:
    """:func:`aggregate` over ``verdicts`` alone; None when there are none."""
    if not verdicts:
        return None
    return aggregate([c.weight for c in verdicts], [c.verdict for c in verdicts])


def reward_vector(breakdown: Sequence[CriterionResult]) -> RewardVector:
    """The vector of a judged rollout: the fixed keys, then each criterion in rubric order."""
    vector: RewardVector = {
        ANCHORS: sub_reward([c for c in breakdown if c.is_anchor]),
        ADAPTIVE: sub_reward([c for c in breakdown if not c.is_anchor]),
    }
    vector.update((c.id, criterion_reward(c.weight, c.verdict)) for c in breakdown)
    return vector


def floor_vector(rubric: RubricVersion, floor: float) -> RewardVector:
    """The vector of a reply the pre-check floored unjudged: ``floor`` on every key, as its
    scalar (a fixed key stays None when the rubric has no criterion of its kind)."""
    vector: RewardVector = {
        ANCHORS: floor if rubric.anchors else None,
        ADAPTIVE: floor if rubric.adaptive else None,
    }
    vector.update((c.id, floor) for c in rubric.criteria)
    return vector
