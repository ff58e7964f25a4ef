"""The Goodhart alarm: the served reward and the audit diverge.

It fires on a step when, over the last ``audit.window`` audited steps (this one
included), the sample's mean training reward rose by at least ``audit.min_trend`` while
its mean audit reward fell by at least as much; when the mean gap between the two
rewards over the sampled top tail jumped by at least ``audit.max_gap_jump`` above its
mean over the earlier steps of the window (a judge that turns lenient shows in the step
it does, even before the policy learns to exploit it and the training reward rises); or
when the auditor keeps less than ``audit.min_top_tail_agreement`` of the sampled top tail
in the top tail (with at least :data:`MIN_TOP_TAIL` top-tail rollouts graded: one
rollout is not a trend).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amaris.audit.models import (
    Alarm,
    AlarmEvidence,
    AuditedRollout,
    CriterionDisagreement,
    DisagreeingRollout,
    Fidelity,
)
from amaris.settings import AuditSettings

MIN_TOP_TAIL = 2
"""Fewest graded top-tail rollouts the top-tail alarm reads."""
EVIDENCE_ROLLOUTS = 5
"""Most disagreeing rollouts given to the analyzer and updater."""
EVIDENCE_CRITERIA = 5
"""Most disagreed criteria given to them."""
EVIDENCE_CHARS = 600
"""Characters kept of an evidence rollout's prompt and reply each."""


@dataclass(frozen=True)
class TrendPoint:
    """One audited step's sample means."""

    step: int
    training: float
    audit: float
    gap: float | None = None
    """Mean ``|training - audit|`` of the step's sampled top tail."""


def check_alarm(
    current: Fidelity, step: int, earlier: Sequence[TrendPoint], settings: AuditSettings
) -> Alarm | None:
    """The alarm this step's audit raises, if any. ``earlier``: audited steps before this
    one, oldest first (only the last ``window - 1`` are read)."""
    if current.training_mean is not None and current.audit_mean is not None:
        now = TrendPoint(step, current.training_mean, current.audit_mean)
        points = [*earlier[-(settings.window - 1) :], now]
        if len(points) >= 2:
            first, last = points[0], points[-1]
            rise, fall = last.training - first.training, first.audit - last.audit
            if rise >= settings.min_trend and fall >= settings.min_trend:
                return Alarm(
                    kind="diverging",
                    reason=(
                        f"from step {first.step} to step {last.step} the training reward "
                        f"rose by {rise:.3f} ({first.training:.3f} -> {last.training:.3f}) "
                        f"while the audit reward fell by {fall:.3f} ({first.audit:.3f} -> "
                        f"{last.audit:.3f}); audit.min_trend is {settings.min_trend}"
                    ),
                )
        jump = gap_jump(current, points[:-1], settings)
        if jump is not None:
            return jump
    agreement = current.top_tail_agreement
    if (
        agreement is not None
        and current.top_tail_sampled >= MIN_TOP_TAIL
        and agreement < settings.min_top_tail_agreement
    ):
        return Alarm(
            kind="top_tail",
            reason=(
                f"step {step}: the auditor keeps {agreement:.0%} of the "
                f"{current.top_tail_sampled} sampled top-tail rollouts in the top tail "
                f"(audit.min_top_tail_agreement is {settings.min_top_tail_agreement})"
            ),
        )
    return None


def gap_jump(
    current: Fidelity, earlier: Sequence[TrendPoint], settings: AuditSettings
) -> Alarm | None:
    """The ``gap_jump`` alarm: ``current``'s top-tail mean gap at least
    ``audit.max_gap_jump`` above the mean of ``earlier``'s (the window's steps before it; at
    least one with a top-tail gap)."""
    gaps = [p.gap for p in earlier if p.gap is not None]
    gap = current.top_tail_gap
    if gap is None or not gaps:
        return None
    baseline = sum(gaps) / len(gaps)
    if gap - baseline < settings.max_gap_jump:
        return None
    return Alarm(
        kind="gap_jump",
        reason=(
            f"the mean gap between the training and audit rewards of the sampled top tail "
            f"jumped to {gap:.3f} from {baseline:.3f} over steps "
            f"{', '.join(str(p.step) for p in earlier if p.gap is not None)}; "
            f"audit.max_gap_jump is {settings.max_gap_jump}"
        ),
    )


def evidence(
    step: int,
    alarm: Alarm,
    rollouts: Sequence[AuditedRollout],
    criteria: Sequence[CriterionDisagreement],
) -> AlarmEvidence:
    """What the analyzer and updater are shown: the alarm's reason, the rollouts the two
    judges rewarded most differently (clipped) and the criteria they read most
    differently."""
    # The rollouts the training judge paid more than the auditor: what it now pays for.
    graded = sorted(
        (r for r in rollouts if r.audit is not None and r.training > r.audit),
        key=lambda r: (-r.gap, r.rollout_id),
    )
    return AlarmEvidence(
        step=step,
        reason=alarm.reason,
        rollouts=[
            DisagreeingRollout(
                rollout_id=r.rollout_id,
                input=r.input[:EVIDENCE_CHARS],
                output=r.output[:EVIDENCE_CHARS],
                output_words=r.output_words,
                training_reward=r.training,
                audit_reward=r.audit if r.audit is not None else 0.0,
            )
            for r in graded[:EVIDENCE_ROLLOUTS]
        ],
        criteria=[c for c in criteria if c.disagreement > 0][:EVIDENCE_CRITERIA],
    )
