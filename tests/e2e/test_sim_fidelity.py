"""``amaris simulate --scenario judge-drift|steady`` end to end: a real ``amaris serve``
whose scorer is the simulator's judge (lenient to padding from the drift step), audited
by the offline judge; ``fidelity.json`` read back. Servers use the session's Prefect test
server (``PREFECT_API_URL``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amaris.cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

STEPS = "6"
"""The run of docs/benchmarks.md's judge-drift table (seed 0): issue 25's goals hold on
it, as on the other seeds there."""
DRIFT = 2
WITHIN = 2
"""The alarm fires at most this many steps after the drift."""
MAX_SHARE = 0.07
"""Audit and judge canary calls together, as a share of the calls that grade a reply."""
MIN_RESTORED = 0.5
"""Share of the reward gap the drift removed that the response restores."""
PER_STEP = "32"
# A fixed mix keeps the padded behaviours at their start share (14%), so the drift shows in
# a step this small; a learning policy has mostly dropped them by the drift step.
FIXED_MIX = ("--learning-rate", "0")


def _simulate(out: Path, *scenario: str) -> dict[str, Any]:
    from prefect.settings import PREFECT_API_URL

    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
        args = ["--steps", STEPS, "--rollouts-per-step", PER_STEP, *FIXED_MIX, "--out", str(out)]
        code = main(["simulate", *scenario, *args])
    assert code == 0
    fidelity: dict[str, Any] = json.loads((out / "fidelity.json").read_text())
    return fidelity


def test_judge_drift_is_caught_within_two_steps_and_the_response_restores_the_gap(
    tmp_path: Path,
) -> None:
    fidelity = _simulate(tmp_path, "--scenario", "judge-drift", "--drift-step", str(DRIFT))
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
    assert fidelity["audit_call_share"] > 0
    assert fidelity["audit_call_share"] + fidelity["canary_call_share"] <= MAX_SHARE
    page = (tmp_path / "report.md").read_text()
    assert "![fidelity-judge-drift.png](fidelity-judge-drift.png)" in page


def test_steady_raises_no_alarm(tmp_path: Path) -> None:
    fidelity = _simulate(tmp_path, "--scenario", "steady")
    assert fidelity["drift_step"] is None
    assert fidelity["first_alarm_step"] is None
    assert fidelity["false_alarms"] == 0
    assert fidelity["audit_call_share"] > 0
    assert fidelity["audit_call_share"] + fidelity["canary_call_share"] <= MAX_SHARE
