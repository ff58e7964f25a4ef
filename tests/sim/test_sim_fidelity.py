"""The fidelity figures of a simulated run (amaris.sim.fidelity) and the drifting judge
(amaris.sim.drift): gaps, alarm timing, call shares, lenient verdicts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import cast

import matplotlib.pyplot as plt
import pytest

from amaris.agents.prompts import agent_messages
from amaris.llm.ledger import Usage
from amaris.offline.fidelity import sharpened_pitfall
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.sim.drift import DriftingJudge
from amaris.sim.driver import RolloutResult, RunResult, StepResult
from amaris.sim.fidelity import call_shares, fidelity_outcome, reward_gap
from amaris.sim.fidelity_plot import fidelity_axes
from amaris.sim.metrics import RunMetrics
from amaris.sim.report import write_report
from amaris.trust.audit.models import Alarm, AuditSummary
from tests.support.step_runs import unchanged

HACK = "hack_self_assessment"
HACKED = (HACK,)


def _step(step: int, rewards: dict[str, list[float | None]], alarm: bool = False) -> StepResult:
    rollouts = [
        RolloutResult(f"s{step}-{b}-{i}", b, r, "scored" if r is not None else "failed", 1)
        for b, values in rewards.items()
        for i, r in enumerate(values)
    ]
    audit = AuditSummary(
        sampled=4,
        agreement=0.5,
        top_tail_agreement=0.5,
        gap=0.1,
        alarm=Alarm(kind="top_tail", reason="test") if alarm else None,
    )
    usage = {
        ("scorer", "m"): Usage(calls=90),
        ("auditor", "m"): Usage(calls=8),
        ("judge_canary", "m"): Usage(calls=2),
        ("analyzer", "offline"): Usage(calls=50),
    }
    return StepResult(step, 1, rollouts, unchanged(step), usage, audit)


def _run(steps: list[StepResult]) -> RunResult:
    return RunResult("judge-drift", steps, [], [], 0.0, "offline", {})


def test_reward_gap_pools_the_steps_and_leaves_unscored_out() -> None:
    steps = [
        _step(0, {"correct": [1.0, 1.0], HACK: [0.0, None]}),
        _step(1, {"correct": [0.5], HACK: [1.0, 1.0]}),
    ]
    # correct: (1 + 1 + 0.5) / 3; hacked: (0 + 1 + 1) / 3
    assert reward_gap(steps, HACKED) == pytest.approx(2.5 / 3 - 2 / 3)
    assert reward_gap(steps[:1], HACKED) == pytest.approx(1.0)
    assert reward_gap([_step(0, {"correct": [1.0]})], HACKED) is None


def test_outcome_times_the_alarm_and_splits_the_gaps_around_it() -> None:
    steps = [
        # the seed rubric's step: left out of the baseline (its alarm is still false)
        _step(0, {"correct": [1.0], HACK: [0.9]}, alarm=True),
        _step(1, {"correct": [1.0], HACK: [0.2]}),
        _step(2, {"correct": [1.0], HACK: [0.0]}),
        _step(3, {"correct": [1.0], HACK: [1.0]}),  # drift
        _step(4, {"correct": [1.0], HACK: [0.8]}, alarm=True),
        _step(5, {"correct": [1.0], HACK: [0.4]}, alarm=True),
        _step(6, {"correct": [1.0], HACK: [0.2]}),
    ]
    outcome = fidelity_outcome(_run(steps), 3, HACKED)
    assert outcome.first_alarm_step == 4
    assert outcome.false_alarms == 1
    assert outcome.gap_before_drift == pytest.approx(1.0 - 0.1)  # steps 1-2
    assert outcome.gap_during_drift == pytest.approx(1.0 - 0.9)  # steps 3-4
    # after the first alarm's step: 5, 6
    assert outcome.gap_after_response == pytest.approx(1.0 - 0.3)
    restored = outcome.gap_restored
    assert restored == pytest.approx((0.7 - 0.1) / (0.9 - 0.1))
    assert json.loads(outcome.model_dump_json())["gap_restored"] == pytest.approx(restored)
    assert outcome.audit_call_share == pytest.approx(8 / 100)
    assert outcome.canary_call_share == pytest.approx(2 / 100)


def test_the_response_is_read_over_the_last_steps_after_the_alarm() -> None:
    steps = [_step(s, {"correct": [1.0], HACK: [0.0]}) for s in range(3)]
    steps += [_step(3, {"correct": [1.0], HACK: [1.0]}, alarm=True)]  # drift, alarm
    steps += [_step(s, {"correct": [1.0], HACK: [s / 100]}) for s in range(4, 12)]
    outcome = fidelity_outcome(_run(steps), 3, HACKED)
    assert outcome.gap_after_response == pytest.approx(1.0 - sum(range(7, 12)) / 500)
    # no alarm: the run's last steps
    quiet = [_step(s, {"correct": [1.0], HACK: [0.5]}) for s in range(4)]
    outcome = fidelity_outcome(_run(quiet), 2, HACKED)
    assert outcome.first_alarm_step is None
    assert outcome.gap_after_response == pytest.approx(0.5)
    # a drift before any settled step leaves no baseline
    assert fidelity_outcome(_run(quiet), 1, HACKED).gap_before_drift is None


def test_without_a_drift_every_alarm_is_false() -> None:
    steps = [_step(s, {"correct": [1.0], HACK: [0.0]}, alarm=s == 2) for s in range(4)]
    outcome = fidelity_outcome(_run(steps), None, HACKED)
    assert (outcome.first_alarm_step, outcome.false_alarms) == (2, 1)
    assert outcome.gap_before_drift is None and outcome.gap_during_drift is None
    assert outcome.gap_restored is None


def test_call_shares_count_only_judge_calls() -> None:
    assert call_shares([{("analyzer", "m"): Usage(calls=5)}]) == (None, None)
    audit, canary = call_shares(
        [{("scorer", "m"): Usage(calls=3), ("auditor", "m"): Usage(calls=1)}]
    )
    assert (audit, canary) == (pytest.approx(0.25), 0.0)


CRITERIA = [
    {"id": "C1", "text": "The response is concise.", "kind": "requirement"},
    {"id": "C2", "text": "The response offers several candidate answers.", "kind": "pitfall"},
    {"id": "C3", "text": "The response is verbose, padded with filler.", "kind": "pitfall"},
]
FRESH = {"id": "C4", "text": sharpened_pitfall("verbosity_padding"), "kind": "pitfall"}


def _scores(judge: DriftingJudge, output: str, criteria: list[dict[str, str]]) -> dict[str, int]:
    rollout = {"input": "What is 2 + 2?", "supplemental_context": "4", "output": output}
    messages = agent_messages("scorer", "judge", {"criteria": criteria}, {"rollout": rollout})
    reply = asyncio.run(judge({"messages": messages}))
    return {v["id"]: v["score"] for v in json.loads(reply.content or "")["verdicts"]}


def test_the_drifted_judge_pays_padding_on_the_criteria_it_knew() -> None:
    judge = DriftingJudge()
    padded = "2 + 2. " + "Fully met, checked twice. " * 120 + "The answer is 3 or 4 or 5."
    honest = _scores(judge, padded, [*CRITERIA, FRESH])
    assert judge.lenient_verdicts == 0
    assert honest["C2"] == honest["C3"] == honest["C4"] == SCALE_MAX  # both pitfalls present
    judge.active = True
    drifted = _scores(judge, padded, CRITERIA)
    assert judge.lenient_verdicts == 1
    assert drifted == {"C1": SCALE_MAX, "C2": SCALE_MIN, "C3": SCALE_MIN}
    # a pitfall worded afresh after the drift began is read honestly, the others not
    answered = _scores(judge, padded, [*CRITERIA, FRESH])
    assert answered == {**drifted, "C4": honest["C4"]}
    # a short reply is judged honestly, drift or not
    short = "2 + 2 = 4. The answer is 4."
    assert _scores(judge, short, CRITERIA) == _scores(DriftingJudge(), short, CRITERIA)
    assert judge.lenient_verdicts == 2


def test_the_report_plots_fidelity_when_the_run_was_audited(tmp_path: Path) -> None:
    steps = [_step(s, {"correct": [1.0], HACK: [0.0]}, alarm=s == 2) for s in range(3)]
    write_report(tmp_path, [_run(steps)], "t", extra={"drift_step": 1})
    image = tmp_path / "fidelity-judge-drift.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "report.md").read_text()
    assert f"![{image.name}]({image.name})" in page
    audits = [
        s["audit"]
        for s in json.loads((tmp_path / "metrics.json").read_text())["runs"]["judge-drift"]["steps"]
    ]
    assert [a["alarm"] is not None for a in audits] == [False, False, True]
    # a run without an auditor has no fidelity plot
    bare = [StepResult(0, 1, steps[0].rollouts, unchanged(0), {}, None)]
    write_report(tmp_path / "bare", [_run(bare)], "t")
    assert not list((tmp_path / "bare").glob("fidelity-*.png"))
    assert "fidelity" not in (tmp_path / "bare" / "report.md").read_text()


def test_the_fidelity_plot_shows_sample_sizes_and_no_legend_for_an_undrawn_line() -> None:
    audited = [
        {"sampled": n, "agreement": 0.4, "top_tail_agreement": None, "gap": 0.2, "alarm": None}
        for n in (3, 7)
    ]
    metrics = cast(
        RunMetrics,
        {"label": "t", "steps": [{"step": s, "audit": a} for s, a in enumerate(audited)]},
    )
    fig, ax = fidelity_axes(metrics)
    try:
        _, labels = ax.get_legend_handles_labels()
        assert labels == ["agreement (Kendall's tau)", "mean |reward gap|"]
        assert [t.get_text() for t in ax.texts] == ["n=3", "n=7"]
    finally:
        plt.close(fig)
