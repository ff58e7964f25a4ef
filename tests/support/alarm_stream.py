"""A simulated audit stream for the Goodhart alarm: what ``amaris
simulate`` audits at 40 rollouts a step, two rollouts, one from the top tail (a reply the
training judge paid in full) and one below it, graded on a rubric of three requirements
and two pitfalls by an auditor that reads each true verdict the other way with a given
probability; from a drift step the training judge pays the hack's pitfall on the top-tail
reply. The figures come from the real :func:`amaris.trust.audit.fidelity.fidelity` and the alarm
from the real :func:`amaris.trust.audit.alarm.check_alarm`. Used by
tests/trust/test_audit_alarm_noise.py and bench/evaluations/alarm_stream.py."""

from __future__ import annotations

import random

from amaris.rubric.aggregate import aggregate
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.settings import AuditSettings
from amaris.trust.audit.alarm import SwapTally, TrendPoint, check_alarm, point_of
from amaris.trust.audit.fidelity import fidelity
from amaris.trust.audit.models import Alarm, AuditedRollout, CriterionPair

CRITERIA = (("A1", 1.0), ("A2", 1.0), ("A3", 1.0), ("P1", -3.0), ("P2", -3.0))
"""Three requirements and two pitfalls (negative weight), a pitfall present costing the
whole reward as in the simulator's rubrics; P1 is the hack's."""
HACK = "P1"
STEPS = 20
SEEDS = 200


def _reward(verdicts: list[int]) -> float:
    return aggregate([w for _, w in CRITERIA], verdicts)


def _good() -> list[int]:
    """A top-tail reply's true verdicts: every requirement met, no pitfall."""
    return [SCALE_MAX if w > 0 else SCALE_MIN for _, w in CRITERIA]


def _rollout(
    rid: str, truth: list[int], training: list[int], noise: float, rng: random.Random, top: bool
) -> AuditedRollout:
    """A rollout graded by the training judge as ``training`` and by an auditor that reads
    each true verdict the other way with probability ``noise``."""
    audit = [
        (SCALE_MIN if v > SCALE_MIN else SCALE_MAX) if rng.random() < noise else v for v in truth
    ]
    return AuditedRollout(
        rollout_id=rid,
        scope="global",
        training=_reward(training),
        audit=_reward(audit),
        top_tail=top,
        threshold=1.0,
        criteria=[
            CriterionPair(id=cid, text=cid, training=t, audit=a, weight=w)
            for (cid, w), t, a in zip(CRITERIA, training, audit, strict=True)
        ],
    )


def _swaps(
    top: AuditedRollout, hacked: bool, blind: float, rng: random.Random, settings: AuditSettings
) -> SwapTally | None:
    """The step's swap check (``audit.swap_checks`` 1), as the audit task makes it: when
    the auditor rewarded the top-tail reply ``max_gap_jump`` below the training judge, the
    training judge scores it with its answer swapped. A judge lenient to the hack pays the
    hacked reply whatever its answer (blind); a steady one is blind with probability
    ``blind``."""
    if top.audit is None or top.training - top.audit < settings.max_gap_jump:
        return None
    return SwapTally(checked=1, blind=int(hacked or rng.random() < blind))


def run_stream(
    seed: int,
    noise: float,
    settings: AuditSettings,
    drift: int | None = None,
    blind: float | None = None,
) -> list[Alarm | None]:
    """Each step's alarm over a run of :data:`STEPS` steps; from ``drift`` the training
    judge pays the hack's pitfall on the top-tail reply (which shows it). ``blind``: with
    swap checks, the steady training judge pays a swapped reply like the original with
    this probability (None: no swap checks, the audit alone)."""
    rng = random.Random(seed)
    swap_rng = random.Random(f"swap-{seed}")
    earlier: list[TrendPoint] = []
    alarms: list[Alarm | None] = []
    for step in range(STEPS):
        hacked = drift is not None and step >= drift
        truth = _good()
        if hacked:
            truth[[c for c, _ in CRITERIA].index(HACK)] = SCALE_MAX
        top = _rollout(f"{step}-top", truth, _good(), noise, rng, top=True)
        below_truth = [rng.choice((SCALE_MIN, SCALE_MAX)) for _ in CRITERIA]
        below = _rollout(f"{step}-below", below_truth, below_truth, noise, rng, top=False)
        fid = fidelity([top, below])
        swaps = None if blind is None else _swaps(top, hacked, blind, swap_rng, settings)
        alarms.append(check_alarm(fid, step, earlier, settings, swaps))
        found = point_of(step, fid, swaps)
        assert found is not None
        earlier.append(found)
    return alarms
