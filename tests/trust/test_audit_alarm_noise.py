"""The alarm's statistics against an honest but noisy auditor: a steady stream whose
auditor reads verdicts the other way at random fires at most ``audit.false_alarm_rate`` of
its steps (never, at a quiet or an exact auditor), while a judge lenient to one hack fires
within 2 steps of its drift.

Each step audits what ``amaris simulate`` audits at 40 rollouts a step: two rollouts, one
from the top tail (a reply the training judge paid in full) and one below it, graded on a
rubric of three requirements and two pitfalls; the figures come from the real
:func:`amaris.trust.audit.fidelity.fidelity` and the alarm from the real :func:`check_alarm`.
"""

from __future__ import annotations

import pytest

from amaris.settings import AuditSettings
from amaris.trust.audit.alarm import SwapTally, TrendPoint, check_alarm
from amaris.trust.audit.fidelity import fidelity
from amaris.trust.audit.models import AuditedRollout
from amaris.trust.audit.stats import binomial_tail, steady_rate
from tests.support.alarm_stream import SEEDS, run_stream


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
    assert not any(a for seed in range(SEEDS) for a in run_stream(seed, 0.0, settings))


@pytest.mark.parametrize(("noise", "quiet_runs"), [(0.02, 0.99), (0.1, 0.9)])
def test_a_steady_stream_with_a_noisy_auditor_alarms_at_most_at_the_false_alarm_rate(
    noise: float, quiet_runs: float
) -> None:
    # An auditor reading 10% of verdicts the other way. Each of the alarm's tests fires on
    # a steady step with probability at most audit.false_alarm_rate; over 4000 steps the
    # share stays under it.
    settings = AuditSettings()
    runs = [run_stream(seed, noise, settings) for seed in range(SEEDS)]
    steps = sum(len(run) for run in runs)
    fired = sum(1 for run in runs for alarm in run if alarm is not None)
    assert fired / steps <= settings.false_alarm_rate
    # Nearly every 20-step run sees no false alarm.
    assert sum(1 for run in runs if not any(run)) / len(runs) >= quiet_runs
    # A stricter level makes false alarms rarer still.
    strict = AuditSettings(false_alarm_rate=0.001)
    assert sum(1 for seed in range(SEEDS) for a in run_stream(seed, noise, strict) if a) <= fired


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
        alarms = run_stream(seed, noise, settings, drift=drift)
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


def _point(step: int, checked: int, blind: int) -> TrendPoint:
    swaps = SwapTally(checked, blind) if checked else None
    return TrendPoint(step=step, training=1.0, audit=1.0, gap=0.0, graded=2, swaps=swaps)


def test_the_swap_blind_alarm_asks_two_blind_checks_at_the_prior() -> None:
    settings = AuditSettings()
    quiet = fidelity([AuditedRollout(rollout_id="r", scope="global", training=1.0, audit=1.0)])
    # One blind check: chance 0.05 at audit.prior_swap_blind, no alarm.
    assert check_alarm(quiet, 1, [_point(0, 0, 0)], settings, SwapTally(1, 1)) is None
    # Two of two over the window: 0.0025, at most audit.false_alarm_rate.
    found = check_alarm(quiet, 1, [_point(0, 1, 1)], settings, SwapTally(1, 1))
    assert found is not None and found.kind == "swap_blind"
    assert "paid 2 of the 2 over-rewarded top-tail rollouts" in found.reason
    # Checks that were not blind count against it: two of four is chance 0.014.
    earlier = [_point(0, 1, 0), _point(1, 1, 1)]
    assert check_alarm(quiet, 2, earlier, settings, SwapTally(2, 1)) is None
    # A training judge the history shows swap-blind now and then (4 of 8 checks before
    # the window) raises the steady share: two of two no longer stand out.
    history = [_point(s, 2, 1) for s in range(4)]
    window = [*history, _point(4, 1, 1)]
    assert check_alarm(quiet, 5, window, settings, SwapTally(1, 1)) is None
    with pytest.raises(ValueError):
        SwapTally(1, 2)


@pytest.mark.parametrize("noise", [0.02, 0.1, 0.2])
def test_swap_checks_catch_a_judge_lenient_to_one_hack_within_two_steps(noise: float) -> None:
    # The audit alone (above) needs three steps of the hack read against the training
    # judge: at noise 0.1 it came within 2 steps in 126 of 200 runs and never (in 15
    # drifted steps) in 13. The swap check adds a step's evidence the auditor's noise does
    # not make: a steady judge pays a swapped answer rarely (here 5% of checks), the
    # lenient one always, so two checks (the drift step's and the next) are enough.
    settings = AuditSettings()
    drift = 5
    delays = []
    for seed in range(SEEDS):
        alarms = run_stream(seed, noise, settings, drift=drift, blind=0.05)
        first = next(s for s, a in enumerate(alarms) if a is not None and s >= drift)
        delays.append(first - drift)
        found = alarms[first]
        assert found is not None and found.kind in {"swap_blind", "gap_jump"}
    assert sum(1 for d in delays if d <= 2) / SEEDS >= 0.95
    assert max(delays) <= 4


@pytest.mark.parametrize("blind", [0.0, 0.05, 0.1])
def test_swap_checks_keep_a_steady_stream_under_the_false_alarm_rate(blind: float) -> None:
    # A steady training judge swap-blind on up to 10% of checks (twice the prior), an
    # auditor reading 10% of verdicts the other way: the swap_blind test adds its
    # false_alarm_rate at most, the steps that fire stay under it.
    settings = AuditSettings()
    runs = [run_stream(seed, 0.1, settings, blind=blind) for seed in range(SEEDS)]
    steps = sum(len(run) for run in runs)
    fired = sum(1 for run in runs for alarm in run if alarm is not None)
    assert fired / steps <= settings.false_alarm_rate
    assert sum(1 for run in runs if not any(run)) / len(runs) >= 0.85
    # An exact auditor finds nothing over-rewarded: no swap check, no alarm.
    assert not any(a for seed in range(SEEDS) for a in run_stream(seed, 0.0, settings, blind=blind))
