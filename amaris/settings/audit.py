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
    ``max_share`` and ``budget_share``. Two: one from the top tail and one below it."""
    max_share: float | None = Field(default=None, gt=0, le=1)
    """Cap on the auditor's calls over the run, as a share of its judged rollouts (what a
    step leaves unspent is carried to the next); it wins over ``min_samples``. None: no
    cap (``sample_share``, at least ``min_samples``, each step)."""
    budget_share: float | None = Field(default=0.07, gt=0, le=1)
    """One budget for the checks on the judge: the auditor's calls, the swap checks and
    the judge canaries' probes together, as a share of the judged rollouts. Each step adds
    this share of its judged rollouts to a credit; once the credit holds one sampled
    rollout and ``swap_checks`` swap checks, the step spends its whole calls (the sample
    all but ``swap_checks`` of them, the canaries what the swap checks leave), else it
    waits for the next step. It wins over ``min_samples`` (amaris/trust/budget.py). None:
    each check sized alone."""
    top_tail: float = Field(default=0.2, gt=0, lt=1)
    """Share of the step's rollouts, by training reward, that forms its top tail."""
    top_tail_share: float = Field(default=0.5, gt=0, lt=1)
    """Share of the sample drawn from the top tail (over-sampled: over-optimisation shows
    there first); the rest is spread evenly over four reward quantiles below it."""
    window: int = Field(default=3, ge=2, le=100)
    """Audited steps (this one and those before it) each alarm pools; the audited steps
    before the window are the steady history it is compared with."""
    min_trend: float = Field(default=0.05, gt=0, le=1)
    """Rise of the sample's mean training reward, and fall of its mean audit reward, over
    the window that the ``diverging`` alarm asks for."""
    max_gap_jump: float = Field(default=0.25, gt=0, le=1)
    """The ``gap_jump`` alarm asks the window's mean top-tail ``|training - audit|`` gap
    to be at least this (a disagreement too small to matter is no alarm)."""
    min_top_tail_agreement: float = Field(default=0.5, ge=0, le=1)
    """The ``top_tail`` alarm asks a smaller share of the sampled top tail to stay in the
    top tail for the auditor."""
    # The alarm's statistics (amaris/trust/audit/stats.py, docs/fidelity.md).
    false_alarm_rate: float = Field(default=0.01, gt=0, lt=1)
    """Level of each alarm's one-sided binomial test: the most likely a steady run (the
    auditor disagreeing at its history's rate) makes the test fire on a step."""
    prior_disagreement: float = Field(default=0.1, gt=0, lt=1)
    """Share of top-tail criterion verdicts the auditor is assumed to read against the
    training judge's payment before the history shows its own (two LLM graders disagree
    on 10-20% of binary criteria)."""
    prior_weight: float = Field(default=20.0, gt=0, le=10_000)
    """How many items' worth of evidence the prior rates count for against the history's:
    small, and the first steps' few items decide the steady rate."""
    swap_checks: int = Field(default=1, ge=0, le=100)
    """Each step, the sampled top-tail rollouts the auditor rewarded at least
    ``max_gap_jump`` below the training judge (most over-rewarded first, at most this
    many) are put to the training judge again with their final answer swapped for a wrong
    one (one scorer call each, counted as judge canary calls and taken from the step's
    ``judge_canaries`` budget). A judge that pays such a reply within
    ``judge_canaries.swap_tolerance`` of the original does not read the answer: the
    ``swap_blind`` alarm tests these. The run's first blind check is confirmed on as many
    more of the step's other top-tail rollouts, longest first. 0: none."""
    prior_swap_blind: float = Field(default=0.05, gt=0, lt=1)
    """Share of swap checks a steady training judge is assumed to pay like the original
    before the history shows its own (a judge given the reference catches a wrong final
    answer in most replies)."""
    on_alarm: OnAlarm = "log"
    """``log``: the alarm is logged, counted and given to the analyzer and updater;
    ``pause``: also ``/score`` answers 503 until ``amaris audit ack`` (or
    ``POST /audit/ack``)."""
