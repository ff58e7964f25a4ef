"""How sure a judge's verdicts make a rollout's reward (the cascade's confidence): the
reward, not each verdict, is what must match the scorer's within ``tolerance``.

A criterion's verdict matters only as far as it can move the reward: a pitfall found on a
reply whose reward is already clamped at 0, or a criterion of small weight, cannot move it
past ``tolerance`` whatever the verdict. So the criteria are taken from the least confident
up, and the rollout is as sure as the first one at which they, together, could move the
reward by more than ``tolerance`` (each set anywhere on the scale, the others held); when
even all of them together could not, it is sure (1). With every criterion able to move the
reward on its own, it is the least confident criterion's confidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from amaris.models import CriterionResult
from amaris.rubric.aggregate import aggregate
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN

SURE = 1.0
"""The confidence of a reward no judged verdict can move by more than the tolerance."""
_EPSILON = 1e-9


def reward_confidence(
    breakdown: Sequence[CriterionResult], confidence: Mapping[str, float], tolerance: float
) -> float | None:
    """The rollout's confidence (module docstring) from its verdicts and each judged
    criterion's ``confidence``; None when no criterion was judged. A confidence for a
    criterion not in ``breakdown`` counts as able to move the reward."""
    if not confidence:
        return None
    weights = [c.weight for c in breakdown]
    verdicts = [float(c.verdict) for c in breakdown]
    index = {c.id: i for i, c in enumerate(breakdown)}
    base = aggregate(weights, verdicts) if breakdown else 0.0
    # The reward is monotone in each verdict (linear, then clamped): pushing the doubtful
    # verdicts all up (for the reward) and all down bounds where they can take it.
    up, down = list(verdicts), list(verdicts)
    for cid in sorted(confidence, key=lambda k: (confidence[k], k)):
        i = index.get(cid)
        if i is None:
            return confidence[cid]
        high, low = (SCALE_MAX, SCALE_MIN) if weights[i] >= 0 else (SCALE_MIN, SCALE_MAX)
        up[i], down[i] = high, low
        reach = max(aggregate(weights, up) - base, base - aggregate(weights, down))
        if reach > tolerance + _EPSILON:
            return confidence[cid]
    return SURE
