"""Turn per-criterion verdicts into one reward. Computed by amaris, never by the LLM.

With verdicts ``v_i`` on the scale ``[SCALE_MIN, SCALE_MAX]`` normalised to
``s_i = (v_i - SCALE_MIN) / (SCALE_MAX - SCALE_MIN)`` in [0, 1], positive weights
``P`` and pitfall (negative) weights ``N``::

    reward = clamp( (sum_P w_i s_i - sum_N |w_i| s_i) / sum_P w_i , 0, 1 )

A rollout meeting every positive criterion and showing no pitfall gets 1; each
pitfall present takes away its weight relative to the positive total. With no
positive criterion (impossible from config, which requires one) the reward is
``1 - sum_N |w_i| s_i / sum_N |w_i|``.
"""

from __future__ import annotations

from collections.abc import Sequence

from amaris.rubric.scale import SCALE_MAX, SCALE_MIN


def normalise(verdict: float) -> float:
    """Map a verdict on the scale (an integer, or a fraction: a mean or expected score) to
    [0, 1]."""
    if not SCALE_MIN <= verdict <= SCALE_MAX:
        raise ValueError(f"verdict {verdict} outside [{SCALE_MIN}, {SCALE_MAX}]")
    return (verdict - SCALE_MIN) / (SCALE_MAX - SCALE_MIN)


def aggregate(weights: Sequence[float], verdicts: Sequence[float]) -> float:
    """Weighted reward in [0, 1] from aligned weights and verdicts."""
    if len(weights) != len(verdicts):
        raise ValueError("weights and verdicts differ in length")
    if not weights:
        raise ValueError("no criteria to aggregate")
    positive = sum(w for w in weights if w > 0)
    negative = sum(-w for w in weights if w < 0)
    gained = sum(w * normalise(v) for w, v in zip(weights, verdicts, strict=True) if w > 0)
    lost = sum(-w * normalise(v) for w, v in zip(weights, verdicts, strict=True) if w < 0)
    raw = (gained - lost) / positive if positive > 0 else 1.0 - lost / negative
    return min(1.0, max(0.0, raw))
