"""metrics.json's typed parts write what the models they mirror dump."""

from __future__ import annotations

import pytest

from amaris.sim.metrics import audit_figures
from amaris.trust.audit.models import Alarm, AuditSummary


@pytest.mark.parametrize(
    "alarm", [None, Alarm(kind="gap_jump", reason="the top tail's gap reached 0.4")]
)
def test_a_steps_audit_figures_are_its_summary_as_json(alarm: Alarm | None) -> None:
    summary = AuditSummary(
        sampled=12,
        agreement=0.61,
        top_tail_agreement=None,
        gap=0.125,
        alarm=alarm,
        swap_checked=2,
        swap_blind=1,
    )
    figures = audit_figures(summary)
    assert figures == summary.model_dump(mode="json")
    assert list(figures) == list(summary.model_dump(mode="json"))
