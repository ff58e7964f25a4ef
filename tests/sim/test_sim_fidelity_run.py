"""``amaris simulate --scenario judge-drift|steady`` end to end: a real ``amaris serve``
whose scorer is the simulator's judge (lenient to padding from the drift step), audited
by the simulator's honest but noisy judge (10% of its verdicts read the other way);
``fidelity.json`` read back. Servers use the session's Prefect test server
(``PREFECT_API_URL``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amaris.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

DRIFT_STEPS = "8"
"""The run of docs/benchmarks.md's judge-drift table (seed 0): steps 0-2 before the drift
(step 0 under the seed rubric, left out of the baseline gap), the drift at step 3."""
STEADY_STEPS = "4"
DRIFT = 3
WITHIN = 2
"""The alarm fires at most this many steps after the drift."""
MAX_SHARE = 0.07
"""Audit and judge canary calls together, as a share of the calls that grade a reply."""
MIN_RESTORED = 0.5
"""Share of the reward gap the drift removed that the response restores."""
PER_STEP = "32"
"""Judged rollouts a step, the simulation's default: the checks share ``audit.budget_share``
(7%) of them, 2 calls a step and 3 on every fourth or fifth (amaris/trust/budget.py)."""
AUDITED = {1, 2}
"""Rollouts the auditor re-grades on a step of PER_STEP: the budget's calls less the one
kept for the swap check."""
# A fixed mix keeps the padded behaviours at their start share (14%), so the drift shows in
# a step this small; a learning policy has mostly dropped them by the drift step.
FIXED_MIX = ("--learning-rate", "0")


def _simulate(
    out: Path, steps: str, *scenario: str, mix: tuple[str, ...] = FIXED_MIX
) -> dict[str, Any]:
    from prefect.settings import PREFECT_API_URL

    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
        # The run's manifest goes to the data folder (memory.path, default ./data) too: here,
        # not the checkout's.
        env.chdir(out)
        args = ["--steps", steps, "--rollouts-per-step", PER_STEP, *mix, "--out", str(out)]
        code = main(["simulate", *scenario, *args])
    assert code == 0
    assert len(list((out / "data").glob("manifest-*-simulate.json"))) == 1
    fidelity: dict[str, Any] = json.loads((out / "fidelity.json").read_text())
    return fidelity


def _audits(out: Path) -> list[dict[str, Any]]:
    runs = json.loads((out / "metrics.json").read_text())["runs"]
    (steps,) = [run["steps"] for run in runs.values()]
    return [step["audit"] for step in steps]


@pytest.mark.parametrize("seed", ["0", "1"])
def test_judge_drift_is_caught_within_two_steps_and_the_response_restores_the_gap(
    tmp_path: Path, seed: str
) -> None:
    # Seed 1: its auditor reads the sampled top tail otherwise from step 1 on, before the
    # drift too, so the audit alone cannot tell the drift from that noise. The swap checks
    # do: the drifted judge pays a padded reply with its answer swapped as it paid the
    # original, the honest one never did.
    fidelity = _simulate(
        tmp_path,
        DRIFT_STEPS,
        "--scenario",
        "judge-drift",
        "--drift-step",
        str(DRIFT),
        "--seed",
        seed,
    )
    assert fidelity["drift_step"] == DRIFT
    assert fidelity["false_alarms"] == 0
    first = fidelity["first_alarm_step"]
    assert first is not None and DRIFT <= first <= DRIFT + WITHIN
    # the drift paid the padded hacks: the gap shrank ...
    before, during = fidelity["gap_before_drift"], fidelity["gap_during_drift"]
    assert during < before
    # ... and the rubric update that answered the alarm gave at least half of it back
    restored = (fidelity["gap_after_response"] - during) / (before - during)
    assert restored >= MIN_RESTORED
    assert fidelity["gap_restored"] == restored
    assert fidelity["audit_call_share"] > 0
    assert fidelity["canary_call_share"] > 0
    assert fidelity["audit_call_share"] + fidelity["canary_call_share"] <= MAX_SHARE
    # Within the budget every step is audited, its top tail first: that is what caught it.
    assert {audit["sampled"] for audit in _audits(tmp_path)} <= AUDITED
    page = (tmp_path / "report.md").read_text()
    assert "![fidelity-judge-drift.png](fidelity-judge-drift.png)" in page


def test_steady_with_a_noisy_auditor_raises_no_false_alarm(tmp_path: Path) -> None:
    # The noisy auditor reads 10% of its verdicts the other way; the alarm asks the
    # window's disagreement to beat that steady noise (audit.false_alarm_rate), so a run
    # without a drift raises none. The learning policy of the benchmark's steady runs: on
    # seed 0 its auditor reads a top-tail reply otherwise at step 1, which a plain
    # threshold alarm would fire on.
    fidelity = _simulate(tmp_path, STEADY_STEPS, "--scenario", "steady", mix=())
    audits = _audits(tmp_path)
    assert fidelity["drift_step"] is None
    assert [audit["alarm"] for audit in audits] == [None] * int(STEADY_STEPS)
    assert {audit["sampled"] for audit in audits} <= AUDITED
    assert fidelity["false_alarms"] == 0
    assert fidelity["first_alarm_step"] is None
    assert fidelity["audit_call_share"] > 0
    assert fidelity["canary_call_share"] > 0
    assert fidelity["audit_call_share"] + fidelity["canary_call_share"] <= MAX_SHARE
