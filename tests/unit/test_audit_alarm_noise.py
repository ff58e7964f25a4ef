"""The alarm's statistics against an honest but noisy auditor (issue 25, point 5: "0 false
alarms in 20 steady steps"): a steady stream whose auditor reads verdicts the other way
at random fires at most ``audit.false_alarm_rate`` of its steps (never, at a quiet or an
exact auditor), while a judge lenient to one hack fires within 2 steps of its drift.

Each step audits what ``amaris simulate`` audits at 40 rollouts a step: two rollouts, one
from the top tail (a reply the training judge paid in full) and one below it, graded on a
rubric of three requirements and two pitfalls; the figures come from the real
:func:`amaris.audit.fidelity.fidelity` and the alarm from the real :func:`check_alarm`.
"""

from __future__ import annotations

import random

import pytest

from amaris.audit.alarm import SwapTally, TrendPoint, check_alarm, point_of
from amaris.audit.fidelity import fidelity
from amaris.audit.models import Alarm, AuditedRollout, CriterionPair
from amaris.audit.stats import binomial_tail, steady_rate
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.scoring.aggregate import aggregate
from amaris.settings import AuditSettings

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


def _run(
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


def test_binomial_tail_and_the_steady_rate() -> None:
    assert binomial_tail(0, 3, 0.1) == 1.0
    assert binomial_tail(3, 3, 0.1) == pytest.approx(0.001)
    assert binomial_tail(2, 3, 0.1) == pytest.approx(3 * 0.01 * 0.9 + 0.001)
    assert binomial_tail(4, 3, 0.1) == 0.0
    assert binomial_tail(1, 1, 0.0) == 0.0
    # No history: the prior; a long history: what it saw.
    assert steady_rate(0, 0, 0.1, 20) == pytest.approx(0.1)
    assert steady_rate(300, 1000, 0.1, 20) == pytest.approx(302 / 1020)
    with pytest.raises(ValueError):
        binomial_tail(1, 2, 1.5)
    with pytest.raises(ValueError):
        steady_rate(3, 2, 0.1, 20)


def test_a_steady_stream_with_an_exact_auditor_never_alarms() -> None:
    settings = AuditSettings()
    assert not any(a for seed in range(SEEDS) for a in _run(seed, 0.0, settings))


@pytest.mark.parametrize(("noise", "quiet_runs"), [(0.02, 0.99), (0.1, 0.9)])
def test_a_steady_stream_with_a_noisy_auditor_alarms_at_most_at_the_false_alarm_rate(
    noise: float, quiet_runs: float
) -> None:
    # An auditor reading 10% of verdicts the other way: what the old alarm fired on in 7-8
    # of 20 steps. Each of the alarm's tests fires on a steady step with probability at
    # most audit.false_alarm_rate; over 4000 steps the share stays under it.
    settings = AuditSettings()
    runs = [_run(seed, noise, settings) for seed in range(SEEDS)]
    steps = sum(len(run) for run in runs)
    fired = sum(1 for run in runs for alarm in run if alarm is not None)
    assert fired / steps <= settings.false_alarm_rate
    # Nearly every 20-step run sees none (0 false alarms in 20 steady steps).
    assert sum(1 for run in runs if not any(run)) / len(runs) >= quiet_runs
    # A stricter level makes false alarms rarer still.
    strict = AuditSettings(false_alarm_rate=0.001)
    assert sum(1 for seed in range(SEEDS) for a in _run(seed, noise, strict) if a) <= fired


@pytest.mark.parametrize(("noise", "within_two"), [(0.0, 1.0), (0.02, 0.9), (0.1, 0.6)])
def test_a_judge_lenient_to_one_hack_alarms_within_two_steps(
    noise: float, within_two: float
) -> None:
    # One top-tail rollout audited a step: three steps of the hack read against the
    # training judge's payment are needed to tell it from noise, so the alarm comes 2
    # steps after the drift when the auditor reads the hack each time ((1 - noise)^3 of
    # the runs), later when its own noise hides the hack in one of them.
    settings = AuditSettings()
    drift = 5
    delays = []
    named = 0
    for seed in range(SEEDS):
        alarms = _run(seed, noise, settings, drift=drift)
        first = next((s for s, a in enumerate(alarms) if a is not None and s >= drift), None)
        if first is None:
            continue
        delays.append(first - drift)
        found = alarms[first]
        assert found is not None and found.kind == "gap_jump"
        named += "criterion P1" in found.reason
    assert min(delays) == 2 or noise > 0
    # The alarm names the hack's criterion (at 10% noise, now and then another one's
    # noise happens to line up first).
    assert named / len(delays) >= 0.95
    assert sum(1 for d in delays if d <= 2) / SEEDS >= within_two
    # At an exact or quiet auditor, every drift is caught.
    assert len(delays) == SEEDS or noise >= 0.1
