"""Task results Prefect pickled before the judge-trust mechanisms moved into amaris.trust
still load: the modules they name re-export the same classes."""

from __future__ import annotations

import pickle

import pytest
from pydantic import BaseModel

import amaris.audit.models
import amaris.rubric.canary_report
import amaris.scoring.canary_report
import amaris.scoring.judge_canaries
from amaris.trust.audit.models import Alarm, RewardGap, StepAudit
from amaris.trust.judge_canaries import JudgeCanaryReport, ProbeResult
from amaris.trust.rubric_canary.report import CanaryProbe, CanaryReport

PICKLED = [
    (amaris.audit.models, [StepAudit, Alarm, RewardGap]),
    (amaris.rubric.canary_report, [CanaryReport, CanaryProbe]),
    (amaris.scoring.canary_report, [CanaryReport, CanaryProbe]),
    (amaris.scoring.judge_canaries, [JudgeCanaryReport, ProbeResult]),
]


def test_the_old_modules_name_the_same_classes() -> None:
    for module, classes in PICKLED:
        for cls in classes:
            assert getattr(module, cls.__name__) is cls, (module.__name__, cls.__name__)


def pickled_under(value: BaseModel, module: str) -> bytes:
    """``value`` pickled as if its class lived in ``module`` (protocol 0 names a class by
    text, so the name can be swapped)."""
    data = pickle.dumps(value, protocol=0)
    here = f"c{type(value).__module__}\n{type(value).__name__}\n".encode()
    assert here in data
    return data.replace(here, f"c{module}\n{type(value).__name__}\n".encode())


@pytest.mark.parametrize(
    ("value", "module"),
    [
        (
            StepAudit(
                step=3, sampled=2, agreement=1.0, top_tail_agreement=1.0, gap=0.1,
                alarm=Alarm(kind="gap_jump", reason="r"),
                over_rewarded=[RewardGap(rollout_id="a", scope="global", training=1, audit=0)],
            ),
            "amaris.audit.models",
        ),
        (CanaryReport(outcome="refused", reason="r"), "amaris.rubric.canary_report"),
        (CanaryReport(outcome="passed"), "amaris.scoring.canary_report"),
        (JudgeCanaryReport(step=2, outcome="checked"), "amaris.scoring.judge_canaries"),
    ],
)  # fmt: skip
def test_a_result_pickled_under_its_old_module_loads(value: BaseModel, module: str) -> None:
    loaded = pickle.loads(pickled_under(value, module))
    assert type(loaded) is type(value)
    assert loaded == value
