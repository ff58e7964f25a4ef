"""The step run's fidelity artifact: this step's audit per scope, the criteria the two
judges read differently, and the trend over the audited steps."""

from __future__ import annotations

from collections.abc import Sequence

from amaris.text.markdown import inert
from amaris.trust.audit.models import StepAudit

TREND_STEPS = 20
"""Audited steps the trend shows (the latest)."""
_BARS = " ▁▂▃▄▅▆▇█"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _cell(text: str) -> str:
    return inert(text.replace("|", "/"), limit=200)


def sparkline(values: Sequence[float | None], low: float = 0.0, high: float = 1.0) -> str:
    """One bar per value between ``low`` and ``high`` (a space for a missing one)."""
    span = high - low or 1.0
    out = []
    for value in values:
        if value is None:
            out.append(" ")
            continue
        share = min(1.0, max(0.0, (value - low) / span))
        out.append(_BARS[1 + round(share * (len(_BARS) - 2))])
    return "".join(out)


def fidelity_markdown(audit: StepAudit, history: Sequence[StepAudit]) -> str:
    """The artifact of ``audit``; ``history``: the audited steps before it, oldest first."""
    lines = [
        f"# Reward fidelity: step {audit.step}",
        "",
        f"**Alarm:** {audit.alarm.kind}: {audit.alarm.reason}"
        if audit.alarm
        else "**Alarm:** none",
        "",
        f"Audited {audit.sampled} rollouts ({audit.failed} without an audit verdict), "
        f"{audit.judge_calls} auditor calls.",
        "",
        "| scope | sampled | Kendall tau | mean gap | top-tail agreement | training mean | "
        "audit mean |",
        "|---|---|---|---|---|---|---|",
        f"| (step) | {audit.sampled} | {_num(audit.agreement)} | {_num(audit.gap)} | "
        f"{_num(audit.top_tail_agreement)} | {_num(audit.training_mean)} | "
        f"{_num(audit.audit_mean)} |",
    ]
    for scope, fid in sorted(audit.scopes.items()):
        lines.append(
            f"| {_cell(scope)} | {fid.sampled} | {_num(fid.agreement)} | {_num(fid.gap)} | "
            f"{_num(fid.top_tail_agreement)} | {_num(fid.training_mean)} | "
            f"{_num(fid.audit_mean)} |"
        )
    if audit.criteria:
        lines += [
            "",
            "## Criteria the judges read differently",
            "",
            "| id | disagreement | rollouts | criterion |",
            "|---|---|---|---|",
        ]
        for c in audit.criteria:
            lines.append(
                f"| {_cell(c.id)} | {c.disagreement:.3f} | {c.rollouts} | {_cell(c.text)} |"
            )
    steps = [*history[-(TREND_STEPS - 1) :], audit]
    lines += [
        "",
        "## Trend",
        "",
        f"training reward `{sparkline([s.training_mean for s in steps])}`  ",
        f"audit reward    `{sparkline([s.audit_mean for s in steps])}`  ",
        f"mean gap        `{sparkline([s.gap for s in steps])}`",
        "",
        "| step | training mean | audit mean | Kendall tau | gap | top-tail agreement | alarm |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in steps:
        lines.append(
            f"| {s.step} | {_num(s.training_mean)} | {_num(s.audit_mean)} | "
            f"{_num(s.agreement)} | {_num(s.gap)} | {_num(s.top_tail_agreement)} | "
            f"{s.alarm.kind if s.alarm else ''} |"
        )
    return "\n".join(lines)
