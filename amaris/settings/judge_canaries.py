"""``judge_canaries:``: each step the training judge scores probes whose right answer is
known (docs/judge-canaries.md). Not the rubric canary (``pipeline.canary``), which checks
a candidate *rubric*; this checks the *judge*."""

from __future__ import annotations

from pydantic import Field

from amaris.settings.base import Section


class JudgeCanarySettings(Section):
    """``judge_canaries:``: probes the training judge must give (about) the floor, and the
    pre-check rules learned when it does not."""

    enabled: bool = True
    """Score the step's probes in its run (a Prefect task, off the hot path)."""
    max_share: float = Field(default=0.02, gt=0, le=1)
    """Most probes per step, as a share of the step's judged rollouts (each probe is one
    scorer call of ``agents.scorer.samples`` requests, as a rollout's), rounded down; a
    step too small for one probe gets one every ``ceil(1 / (max_share * judged))`` steps
    (at 32 judged rollouts and 0.02: every second step), within the same share. With the
    auditor on, less its swap checks and within what ``audit.budget_share`` leaves."""
    floor_margin: float = Field(default=0.1, ge=0, le=1)
    """A probe with no right answer in it is an alarm when its reward exceeds
    ``scoring.precheck.floor`` (the reward the pre-check gives a degenerate reply) by more
    than this."""
    swap_tolerance: float = Field(default=0.1, ge=0, le=1)
    """A reply with its final answer swapped for a wrong one is an alarm when its reward
    is within this of the original reply's."""
    learn_rules: bool = True
    """An alarm adds a learned rule to the pre-check (``GET /precheck/rules``)."""
    max_rules: int = Field(default=1000, ge=0, le=100_000)
    """Most learned rules in force; past it an alarm is logged and counted, no rule added."""
