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
"""The run of docs/benchmarks.md's row C. When the alarm fires in it varies from run to
run (at the drift step, or 3 steps late: the goal of "within 2 steps" is not met
reliably, see that page), so this test holds what every run shows: the drift is seen in
the gap, and no alarm comes before it."""
DRIFT = 2
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


def test_judge_drift_shrinks_the_gap_and_no_alarm_comes_before_it(tmp_path: Path) -> None:
    fidelity = _simulate(tmp_path, "--scenario", "judge-drift", "--drift-step", str(DRIFT))
    assert fidelity["drift_step"] == DRIFT
    assert fidelity["false_alarms"] == 0
    first = fidelity["first_alarm_step"]
    assert first is None or first >= DRIFT
    # the drift paid the padded hacks: the gap shrank
    assert fidelity["gap_during_drift"] < fidelity["gap_before_drift"]
    assert 0 < fidelity["audit_call_share"] < 1
    page = (tmp_path / "report.md").read_text()
    assert "![fidelity-judge-drift.png](fidelity-judge-drift.png)" in page


def test_steady_raises_no_alarm(tmp_path: Path) -> None:
    fidelity = _simulate(tmp_path, "--scenario", "steady")
    assert fidelity["drift_step"] is None
    assert fidelity["first_alarm_step"] is None
    assert fidelity["false_alarms"] == 0
    assert fidelity["audit_call_share"] > 0
