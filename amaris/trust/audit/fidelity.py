"""How well the served reward agrees with the audit: rank agreement (Kendall's tau-b), the
mean gap, agreement in the top tail, and which criteria the two judges read differently.

Pure functions of the audited sample (a few dozen to a few hundred rollouts: tau-b is
computed over every pair, O(n^2), without a statistics dependency)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.trust.audit.models import (
    AuditedRollout,
    CriterionDisagreement,
    CriterionTally,
    Fidelity,
)

_EPSILON = 1e-9


def _sign(value: float) -> int:
    return 0 if abs(value) <= _EPSILON else (1 if value > 0 else -1)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b of two aligned series (ties corrected); None under two items or
    when either series is constant (no ranking to agree with)."""
    if len(x) != len(y):
        raise ValueError("the two series differ in length")
    concordant = discordant = ties_x = ties_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = _sign(x[i] - x[j]), _sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    if denominator == 0:
        return None
    return (concordant - discordant) / denominator


def criterion_disagreement(rollouts: Sequence[AuditedRollout]) -> list[CriterionDisagreement]:
    """Per criterion (id and text) both judges gave a verdict on: the mean absolute
    difference of their verdicts as a share of the scale, most disagreed first."""
    diffs: dict[tuple[str, str], list[float]] = defaultdict(list)
    span = SCALE_MAX - SCALE_MIN
    for rollout in rollouts:
        for pair in rollout.criteria:
            diffs[(pair.id, pair.text)].append(abs(pair.training - pair.audit) / span)
    found = [
        CriterionDisagreement(
            id=cid, text=text, disagreement=round(sum(d) / len(d), 4), rollouts=len(d)
        )
        for (cid, text), d in diffs.items()
    ]
    return sorted(found, key=lambda c: (-c.disagreement, c.id))


def criterion_tally(top_tail: Sequence[AuditedRollout]) -> list[CriterionTally]:
    """Per criterion (id and text) over graded top-tail rollouts: the pairs of verdicts,
    and those whose training verdict paid more than the audit's, by id then text."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for rollout in top_tail:
        for pair in rollout.criteria:
            count = counts[(pair.id, pair.text)]
            count[0] += 1
            count[1] += int(pair.pays_more)
    return [
        CriterionTally(id=cid, text=text, pairs=pairs, paid_more=paid)
        for (cid, text), (pairs, paid) in sorted(counts.items())
    ]


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def fidelity(rollouts: Sequence[AuditedRollout]) -> Fidelity:
    """The fidelity figures of an audited sample (rollouts the auditor gave no verdict on
    count as ``failed`` and are left out)."""
    graded = [r for r in rollouts if r.audit is not None]
    training = [r.training for r in graded]
    audit = [r.audit for r in graded if r.audit is not None]
    tail = [r for r in graded if r.top_tail]
    kept = [r for r in tail if r.audit is not None and r.audit >= r.threshold - _EPSILON]
    tau = kendall_tau(training, audit)
    return Fidelity(
        sampled=len(graded),
        failed=len(rollouts) - len(graded),
        agreement=round(tau, 4) if tau is not None else None,
        gap=_mean([r.gap for r in graded]),
        top_tail_agreement=round(len(kept) / len(tail), 4) if tail else None,
        top_tail_sampled=len(tail),
        top_tail_gap=_mean([r.gap for r in tail]),
        top_tail_kept=len(kept),
        over_rewarded=sum(
            1 for r in graded if r.audit is not None and r.training > r.audit + _EPSILON
        ),
        tally=criterion_tally(tail),
        training_mean=_mean(training),
        audit_mean=_mean(audit),
        criteria=criterion_disagreement(graded),
    )
