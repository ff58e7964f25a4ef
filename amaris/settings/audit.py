"""``audit:``: the audit judge's sample and the Goodhart alarm (docs/fidelity.md).

The audit is on when ``client.auditor`` or ``agents.auditor`` is set
(:attr:`amaris.settings.Settings.auditor_on`); these keys say how much it re-grades and
when its disagreement with the training judge is an alarm.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from amaris.settings.base import Section

OnAlarm = Literal["log", "pause"]
"""``audit.on_alarm``."""


class AuditSettings(Section):
    """``audit:``: what the auditor re-grades each step, and when to raise the alarm."""

    sample_share: float = Field(default=0.05, gt=0, le=1)
    """Share of the step's scored rollouts the auditor re-grades (each one judge call)."""
    min_samples: int = Field(default=2, ge=2, le=10_000)
    """Fewest rollouts re-graded a step (all of them in a smaller step), within
    ``max_share``. Two: one from the top tail and one below it."""
    max_share: float | None = Field(default=None, gt=0, le=1)
    """Cap on the auditor's calls over the run, as a share of its judged rollouts (what a
    step leaves unspent is carried to the next); it wins over ``min_samples``. None: no
    cap (``sample_share``, at least ``min_samples``, each step)."""
    top_tail: float = Field(default=0.2, gt=0, lt=1)
    """Share of the step's rollouts, by training reward, that forms its top tail."""
    top_tail_share: float = Field(default=0.5, gt=0, lt=1)
    """Share of the sample drawn from the top tail (over-sampled: over-optimisation shows
    there first); the rest is spread evenly over four reward quantiles below it."""
    window: int = Field(default=3, ge=2, le=100)
    """Steps (this one and the audited ones before it) the trend alarm compares."""
    min_trend: float = Field(default=0.05, gt=0, le=1)
    """Rise of the sample's mean training reward, and fall of its mean audit reward, over
    the window that together raise the alarm."""
    max_gap_jump: float = Field(default=0.25, gt=0, le=1)
    """Alarm when the sample's mean ``|training - audit|`` reward gap exceeds its mean
    over the earlier audited steps of the window by at least this."""
    min_top_tail_agreement: float = Field(default=0.5, ge=0, le=1)
    """Alarm when a smaller share of the sampled top tail stays in the top tail for the
    auditor."""
    on_alarm: OnAlarm = "log"
    """``log``: the alarm is logged, counted and given to the analyzer and updater;
    ``pause``: also ``/score`` answers 503 until ``amaris audit ack`` (or
    ``POST /audit/ack``)."""
