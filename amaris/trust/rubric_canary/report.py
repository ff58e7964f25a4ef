"""The rubric canary's verdict: its probes as judged, and the rules that refuse a candidate
(:mod:`amaris.trust.rubric_canary.check` says which probes and why). Pure: no judge, no I/O."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from amaris.models import Rollout
from amaris.step_answer import CanarySummary

Side = Literal["pass", "fail", "flagged"]
Kind = Literal["rollout", "reference", "master_key", "claim", "hack", "phrase", "swapped"]

PASS_AT = 0.75
"""Anchor reward from which a probe is anchor-passing (and what a phrase probe may not
reach on a prompt without a passing probe)."""
SAID_LIFT = 0.5
"""A criterion whose verdict a wrong answer raises by this share of the scale by saying
its words pays for words."""
_EPSILON = 1e-9


class CanaryRollout(BaseModel):
    """What the canary reads of one logged rollout of the step."""

    id: str
    input: str
    output: str
    supplemental_context: str | None = None
    group: str
    """The prompt it answers (``group_id``, else its input)."""
    rubric_version: int | None = None
    verdicts: dict[str, float] = Field(default_factory=dict)
    """Verdict per ``<criterion id>:<text>`` of the rubric it was scored under."""
    trajectory: Rollout | None = None
    """The rollout as the trainer sent it when it is a trajectory (its messages, outcome and
    finish reason; ``input`` and ``output`` are the texts derived of them)."""


class CanaryProbe(BaseModel):
    """One probe as the canary judged it."""

    id: str
    kind: Kind
    group: str
    side: Side
    current: float | None
    """Its reward under the rubric in force (None for a phrase probe: not asked)."""
    candidate: float
    anchors: float | None = None
    """Its reward under the anchors alone."""
    base: str | None = None
    """A phrase probe's wrong answer: the probe it was made from."""
    carries: str | None = None
    """A phrase probe's criterion: the id whose words it carries."""
    lift: float | None = None
    """How far those words raise that criterion's verdict over the wrong answer, as a share
    of the scale."""


class CanaryReport(CanarySummary):
    """The canary's verdict on a candidate rubric, with the probes it judged (a step's
    outcome keeps it as the :class:`~amaris.step_answer.CanarySummary` it is: without them)."""

    probes: list[CanaryProbe] = Field(default_factory=list)


def _named(probe: CanaryProbe) -> str:
    current = "-" if probe.current is None else f"{probe.current:.3f}"
    return f"{probe.kind} {probe.id} (candidate {probe.candidate:.3f}, current {current})"


def _inversion(by_group: dict[str, list[CanaryProbe]]) -> str | None:
    found = [
        (p, f)
        for members in by_group.values()
        for p in members
        if p.side == "pass" and p.current is not None
        for f in members
        if f.side == "fail" and f.current is not None
        if p.current > f.current + _EPSILON and f.candidate > p.candidate + _EPSILON
    ]
    if not found:
        return None
    p, f = found[0]
    return (
        f"anchor-failing {_named(f)} would outscore anchor-passing {_named(p)} of the same "
        f"prompt, which the current rubric ranks above it; {len(found)} inversion(s)"
    )


def _phrase_paid(by_group: dict[str, list[CanaryProbe]]) -> str | None:
    for members in by_group.values():
        ids = {p.id: p for p in members}
        passing = [p for p in members if p.side == "pass"]
        for probe in (p for p in members if p.kind == "phrase"):
            base = ids.get(probe.base or "")
            floor = base.candidate if base is not None else 0.0
            if probe.candidate <= floor + _EPSILON:
                continue  # its words gain nothing
            made = f"the wrong answer {_named(base)}" if base else "a wrong answer"
            if (probe.lift or 0.0) + _EPSILON >= SAID_LIFT:
                return (
                    f"criterion {probe.carries} pays for words: {_named(probe)}, {made} "
                    f"carrying its words, meets it ({probe.lift:+.2f} of the scale)"
                )
            right = min(passing, key=lambda p: p.candidate, default=None)
            bar = right.candidate if right is not None else PASS_AT
            if probe.candidate + _EPSILON >= bar:
                reached = _named(right) if right is not None else f"the passing mark {PASS_AT}"
                return (
                    f"criterion {probe.carries} pays for words: {_named(probe)}, {made} "
                    f"carrying its words, reaches anchor-passing {reached}"
                )
    return None


def _flagged_gain(by_group: dict[str, list[CanaryProbe]], max_gap_shrink: float) -> str | None:
    for members in by_group.values():
        passing = [p for p in members if p.side == "pass" and p.current is not None]
        if not passing:
            continue
        best = max(passing, key=lambda p: p.candidate)
        was = max(p.current or 0.0 for p in passing)
        for probe in (p for p in members if p.side == "flagged" and p.current is not None):
            before, after = was - (probe.current or 0.0), best.candidate - probe.candidate
            gained = probe.candidate > (probe.current or 0.0) + _EPSILON
            if gained and after < before - max_gap_shrink * abs(before) - _EPSILON:
                return (
                    f"flagged {_named(probe)}, a rollout the step's analysis flagged as a "
                    f"hack, would gain on anchor-passing {_named(best)}: its margin below "
                    f"it would go from {before:.3f} to {after:.3f}"
                )
    return None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def decide(probes: Sequence[CanaryProbe], max_gap_shrink: float) -> CanaryReport:
    """The report on ``probes`` (judged under both rubrics): refused on the first rule
    that fails (inversion, phrase, flagged gain, gap), passed when a rule had probes to
    check, else skipped."""
    listed = list(probes)
    by_group: dict[str, list[CanaryProbe]] = defaultdict(list)
    for probe in listed:
        by_group[probe.group].append(probe)
    sided: list[tuple[str, CanaryProbe, CanaryProbe]] = []  # prompt, best pass, best fail
    gaps: dict[str, list[float]] = {"current": [], "candidate": [], "anchors": []}
    for group, members in by_group.items():
        passing = [p for p in members if p.side == "pass" and p.current is not None]
        failing = [p for p in members if p.side == "fail" and p.current is not None]
        if not passing or not failing:
            continue
        best_pass = max(passing, key=lambda p: p.candidate)
        best_fail = max(failing, key=lambda p: p.candidate)
        sided.append((group, best_pass, best_fail))
        gaps["current"].append(
            max(p.current or 0.0 for p in passing) - max(f.current or 0.0 for f in failing)
        )
        gaps["candidate"].append(best_pass.candidate - best_fail.candidate)
        gaps["anchors"].append(
            max(p.anchors or 0.0 for p in passing) - max(f.anchors or 0.0 for f in failing)
        )
    figures = {f"{name}_gap": round(_mean(values), 4) for name, values in gaps.items() if values}
    rules = (_inversion, _phrase_paid, lambda groups: _flagged_gain(groups, max_gap_shrink))
    for rule in rules:
        reason = rule(by_group)
        if reason is not None:
            return CanaryReport(outcome="refused", reason=reason, probes=listed, **figures)
    if sided:
        candidate = _mean(gaps["candidate"])
        for name in ("current", "anchors"):
            before = _mean(gaps[name])
            if before > 0 and before - candidate > max_gap_shrink * before + _EPSILON:
                group, p, f = min(sided, key=lambda s: s[1].candidate - s[2].candidate)
                under = "the rubric in force" if name == "current" else "the anchors alone"
                reason = (
                    f"the mean reward gap between anchor-passing and anchor-failing probes "
                    f"would shrink from {before:.3f} (under {under}) to {candidate:.3f}, more "
                    f"than {max_gap_shrink:.0%} (pipeline.canary.max_gap_shrink); narrowest "
                    f"prompt: {_named(p)} over {_named(f)}"
                )
                return CanaryReport(outcome="refused", reason=reason, probes=listed, **figures)
    checked = sided or any(p.kind == "phrase" or p.side == "flagged" for p in listed)
    if not checked:
        return CanaryReport(
            outcome="skipped", reason="no prompt with probes on both sides", probes=listed
        )
    return CanaryReport(outcome="passed", probes=listed, **figures)
