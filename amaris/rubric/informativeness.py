"""Per-criterion informativeness of a step's verdicts, and the criteria it retires.

For every criterion, over the scored rollouts of one step and scope (a rollout id sent
twice counts once, its last record; late and unscored records are left out):

- ``mean`` and ``variance`` (population) of its verdicts on the scale;
- ``extreme_share``: the share of verdicts at either end of the scale (``at_min_share`` +
  ``at_max_share``);
- ``zero_spread_group_share``: among the groups (same ``group_id``, else same input) with
  two verdicts or more on it, the share whose verdicts are all equal; a group with equal
  verdicts gives GRPO no advantage to learn from;
- ``reward_correlation``: Pearson's r between its verdicts and the rollouts' rewards
  (null when either is constant).

A criterion is **saturated** when one end of the scale holds at least
:data:`SATURATED_SHARE` of its verdicts, and has **zero spread** when every group's
verdicts are equal (with no group of two: when all its verdicts are equal). Either makes
it **uninformative** for the step (from :data:`MIN_VERDICTS` verdicts on). An adaptive
criterion uninformative for ``rubric.retire_uninformative_after`` consecutive steps under
the same text is due to be retired or reworded; anchors never are.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

# Moved to amaris.agents.blocks (the prompts type the blocks that carry them); importable
# here still, for the importers and the task results Prefect pickled under this name.
from amaris.agents.blocks import DueCriterion as DueCriterion
from amaris.agents.blocks import UpdaterCriterion as UpdaterCriterion
from amaris.agents.schemas import RubricModification
from amaris.memory.records import LoggedVerdict, RolloutRecord
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN

SATURATED_SHARE = 0.95
"""A criterion with this share of its verdicts at one end of the scale is saturated."""
MIN_VERDICTS = 2
"""Fewer verdicts on a criterion in a step say nothing about its spread."""
_EPS = 1e-9


class CriterionStats(BaseModel):
    """How much one criterion's verdicts told apart the rollouts of a step."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str = Field(description="Its text in the step's latest verdict.")
    weight: float
    is_anchor: bool
    verdicts: int = Field(description="Scored rollouts with a verdict on it.")
    mean: float = Field(description="Mean verdict on the 0-4 scale.")
    variance: float = Field(description="Population variance of the verdicts.")
    extreme_share: float = Field(description="Share of verdicts at 0 or 4.")
    at_min_share: float = Field(description="Share of verdicts at 0.")
    at_max_share: float = Field(description="Share of verdicts at 4.")
    groups: int = Field(description="Groups (same prompt) with two verdicts or more.")
    zero_spread_group_share: float | None = Field(
        description="Share of those groups whose verdicts are all equal; null without any."
    )
    reward_correlation: float | None = Field(
        description="Pearson's r of verdict and reward; null when either is constant."
    )
    saturated: bool = Field(description=f"One end holds >= {SATURATED_SHARE:.0%} of verdicts.")
    zero_spread: bool = Field(description="Every group's verdicts are equal.")
    uninformative: bool = Field(description="Saturated or zero spread, on enough verdicts.")


class ScopeStats(BaseModel):
    """The criteria of one scope in one step."""

    model_config = ConfigDict(frozen=True)

    scope: str
    rollouts: int = Field(description="Scored rollouts of the scope in the step.")
    criteria: list[CriterionStats] = Field(description="Anchors first, in rubric order.")


def scored_records(records: Iterable[RolloutRecord]) -> list[RolloutRecord]:
    """The records statistics count: the last record of each (scope, rollout id), not
    late, scored, with verdicts; in log order."""
    latest: dict[tuple[str, str], RolloutRecord] = {}
    for record in records:
        if record.late:
            continue
        key = (record.scope, record.rollout.id)
        latest.pop(key, None)  # keep log order of the last record
        latest[key] = record
    return [
        r for r in latest.values() if r.status == "scored" and r.score is not None and r.verdicts
    ]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _variance(values: Sequence[float]) -> float:
    mu = _mean(values)
    return sum((v - mu) ** 2 for v in values) / len(values)


def _correlation(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Pearson's r, or None when fewer than two pairs or either side is constant."""
    if len(xs) < 2:
        return None
    vx, vy = _variance(xs), _variance(ys)
    if vx <= _EPS or vy <= _EPS:
        return None
    mx, my = _mean(xs), _mean(ys)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / len(xs)
    return max(-1.0, min(1.0, cov / math.sqrt(vx * vy)))


def criterion_stats(records: Sequence[RolloutRecord]) -> list[CriterionStats]:
    """Statistics of every criterion seen in ``records`` (one scope's
    :func:`scored_records`), anchors first, then by id (R2 before R10)."""
    verdicts: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    latest: dict[str, LoggedVerdict] = {}
    for record in records:
        group = record.rollout.group_id or record.rollout.input
        for verdict in record.verdicts:
            verdicts[verdict.id].append((float(verdict.verdict), float(record.score or 0), group))
            latest[verdict.id] = verdict
    stats = [_one(latest[cid], found) for cid, found in verdicts.items()]
    # R2 before R10: by length, then text
    return sorted(stats, key=lambda s: (not s.is_anchor, len(s.id), s.id))


def _one(last: LoggedVerdict, found: Sequence[tuple[float, float, str]]) -> CriterionStats:
    values = [v for v, _, _ in found]
    rewards = [r for _, r, _ in found]
    n = len(values)
    at_min = sum(1 for v in values if v == SCALE_MIN) / n
    at_max = sum(1 for v in values if v == SCALE_MAX) / n
    by_group: dict[str, list[float]] = defaultdict(list)
    for value, _, group in found:
        by_group[group].append(value)
    spreads = [max(g) - min(g) for g in by_group.values() if len(g) >= 2]
    flat_share = sum(1 for s in spreads if s <= _EPS) / len(spreads) if spreads else None
    variance = _variance(values)
    saturated = max(at_min, at_max) >= SATURATED_SHARE
    zero_spread = flat_share == 1.0 if flat_share is not None else variance <= _EPS
    return CriterionStats(
        id=last.id,
        text=last.text,
        weight=last.weight,
        is_anchor=last.is_anchor,
        verdicts=n,
        mean=_mean(values),
        variance=variance,
        extreme_share=at_min + at_max,
        at_min_share=at_min,
        at_max_share=at_max,
        groups=len(spreads),
        zero_spread_group_share=flat_share,
        reward_correlation=_correlation(values, rewards),
        saturated=saturated,
        zero_spread=zero_spread,
        uninformative=n >= MIN_VERDICTS and (saturated or zero_spread),
    )


def step_stats(records: Iterable[RolloutRecord]) -> list[ScopeStats]:
    """Per scope (sorted), the statistics of a step's rollout-log records."""
    by_scope: dict[str, list[RolloutRecord]] = defaultdict(list)
    for record in scored_records(records):
        by_scope[record.scope].append(record)
    return [
        ScopeStats(scope=scope, rollouts=len(found), criteria=criterion_stats(found))
        for scope, found in sorted(by_scope.items())
    ]


def why(stats: CriterionStats) -> str:
    """One line of evidence: what made the criterion uninformative, with its figures."""
    reasons = []
    if stats.saturated:
        end, share = (
            (SCALE_MAX, stats.at_max_share)
            if stats.at_max_share >= stats.at_min_share
            else (SCALE_MIN, stats.at_min_share)
        )
        reasons.append(f"saturated ({share:.0%} of {stats.verdicts} verdicts at {end})")
    if stats.zero_spread:
        if stats.zero_spread_group_share is not None:
            reasons.append(f"zero spread in all {stats.groups} groups")
        else:
            reasons.append("zero spread")
    figures = f"mean {stats.mean:.2f}, variance {stats.variance:.3f}"
    return f"{' and '.join(reasons) or 'informative'}; {figures}"


def uninformative_streak(criterion: Criterion, history: Sequence[ScopeStats | None]) -> int:
    """Consecutive steps, newest first in ``history`` (this step, the one before, ...; None
    for a step without rollouts of the scope), in which ``criterion`` under its current
    text was uninformative."""
    streak = 0
    for scope_stats in history:
        found = _find(scope_stats, criterion.id)
        if found is None or found.text != criterion.text or not found.uninformative:
            break
        streak += 1
    return streak


def _find(scope_stats: ScopeStats | None, cid: str) -> CriterionStats | None:
    if scope_stats is None:
        return None
    return next((c for c in scope_stats.criteria if c.id == cid), None)


def due_for_retirement(
    rubric: RubricVersion, history: Sequence[ScopeStats | None], after: int | None
) -> list[DueCriterion]:
    """The adaptive criteria of ``rubric`` uninformative for ``after`` consecutive steps
    ending with ``history[0]`` (none when ``after`` is None). Anchors are never due."""
    if after is None:
        return []
    due = []
    for criterion in rubric.adaptive:
        streak = uninformative_streak(criterion, history)
        if streak < after:
            continue
        lines = []
        for back, scope_stats in enumerate(history[:streak]):
            found = _find(scope_stats, criterion.id)
            assert found is not None  # within the streak
            lines.append(f"{back} step(s) back: {why(found)}")
        evidence = f"{criterion.id} uninformative for {streak} consecutive step(s): " + "; ".join(
            lines
        )
        due.append(
            DueCriterion(
                criterion_id=criterion.id, text=criterion.text, steps=streak, evidence=evidence
            )
        )
    return due


def retirements(
    rubric: RubricVersion,
    modifications: Sequence[RubricModification],
    due: Sequence[DueCriterion],
    max_modifications: int,
) -> list[RubricModification]:
    """``retire`` modifications for the due criteria ``modifications`` neither reword
    (``edit``) nor retire, within ``max_modifications`` in all; a due criterion whose
    retirement would leave no positive weight in the rubric is kept. Each carries its
    evidence as its reason."""
    handled = {m.criterion_id for m in modifications if m.action in ("edit", "retire")}
    retired = {m.criterion_id for m in modifications if m.action == "retire"}
    room = max_modifications - len(modifications)
    extra: list[RubricModification] = []
    for item in due:
        if item.criterion_id in handled or len(extra) >= room:
            continue
        left = [
            c.weight for c in rubric.criteria if c.id not in retired and c.id != item.criterion_id
        ]
        if not any(w > 0 for w in left):
            continue
        retired.add(item.criterion_id)
        extra.append(
            RubricModification(
                action="retire",
                criterion_id=item.criterion_id,
                reason=f"Retired as uninformative: {item.evidence}",
            )
        )
    return extra


class UpdaterView(BaseModel):
    """What the updater reads of the criteria's informativeness."""

    model_config = ConfigDict(frozen=True)

    criterion_stats: list[UpdaterCriterion]
    uninformative: list[DueCriterion]
    """The criteria due to be retired or reworded, with their evidence."""


def updater_view(
    rubric: RubricVersion, history: Sequence[ScopeStats | None], due: Sequence[DueCriterion]
) -> UpdaterView:
    """What the updater reads: this step's statistics of each criterion (figures to three
    decimals, with ``uninformative_steps``, its streak so far), and the criteria due to
    be retired or reworded with their evidence."""
    current = history[0] if history else None
    in_rubric = {c.id: c for c in rubric.criteria}
    rows = []
    for stats in current.criteria if current is not None else []:
        criterion = in_rubric.get(stats.id)
        rows.append(
            UpdaterCriterion(
                id=stats.id,
                verdicts=stats.verdicts,
                mean=round(stats.mean, 3),
                variance=round(stats.variance, 3),
                extreme_share=round(stats.extreme_share, 3),
                zero_spread_group_share=_rounded(stats.zero_spread_group_share),
                reward_correlation=_rounded(stats.reward_correlation),
                saturated=stats.saturated,
                zero_spread=stats.zero_spread,
                uninformative_steps=(
                    uninformative_streak(criterion, history) if criterion is not None else 0
                ),
            )
        )
    return UpdaterView(criterion_stats=rows, uninformative=list(due))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
