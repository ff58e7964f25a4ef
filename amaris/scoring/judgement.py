"""What judging one rollout gives back (:class:`Judgement`): a verdict per criterion of the
rubric, rule and judge alike, in its order, the turns the judge attributed them to (of a
trajectory) and the fields cut; or why there is none."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from amaris.models import CriterionResult
from amaris.rubric.model import RubricVersion
from amaris.scoring.trajectory_view import TrajectoryView


@dataclass(frozen=True)
class Judged:
    """What one judge call gave: the judged criteria's verdicts (what the cache keeps)."""

    breakdown: tuple[CriterionResult, ...]
    turns: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Per judged criterion, the turns the judge attributed it to (of a trajectory)."""
    confidence: dict[str, float] = field(default_factory=dict)
    """Per judged criterion, how sure the judge was, in [0, 1]: logprob margin or samples'
    agreement (:func:`~amaris.scoring.verdicts.criterion_confidence`)."""
    listwise: bool = False
    """Judged in one call with the other rollouts of its group (``scoring.group_mode``)."""


JudgeName = Literal["cheap", "strong"]
"""Which judge's verdicts made a reward: the cascade's cheap scorer, or the scorer."""


@dataclass(frozen=True)
class Judgement:
    """The judge's answer on one rollout: a verdict per criterion, or why there is none."""

    rubric_version: int
    truncated: list[str]
    """Fields cut (``rollout.<name>``): by ``scoring.max_field_chars``, then by the budget."""
    breakdown: tuple[CriterionResult, ...] | None = None
    """One verdict per criterion of the rubric (judge and rule alike), in its order; None =
    not judged."""
    cached: bool = False
    failure: str | None = None
    """``<kind>: <error>`` when not judged (``judge_timeout``, ``judge_unavailable``...)."""
    turns: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Of a trajectory: per judged criterion, the message indexes the judge attributed it to
    (as written: :func:`~amaris.scoring.turn_rewards.turn_rewards` checks them)."""
    judge: JudgeName | None = None
    """The judge whose verdicts are in the breakdown; None when no judge gave any (rule
    criteria alone, or no verdict)."""
    confidence: dict[str, float] = field(default_factory=dict)
    """Per judged criterion, how sure that judge was (:attr:`Judged.confidence`)."""
    listwise: bool = False
    """The verdicts came from a call on the rollout's whole group (:attr:`Judged.listwise`)."""

    @property
    def judge_mode(self) -> Literal["pointwise", "listwise"] | None:
        """How the judge saw the rollout: alone or with its group; None when no judge gave
        the verdicts."""
        if self.judge is None:
            return None
        return "listwise" if self.listwise else "pointwise"


def merge_verdicts(
    rubric: RubricVersion,
    rules: dict[str, CriterionResult],
    judged: tuple[CriterionResult, ...],
) -> tuple[CriterionResult, ...]:
    """The rule and judge verdicts together, in the rubric's order."""
    by_id = {**rules, **{c.id: c for c in judged}}
    return tuple(by_id[c.id] for c in rubric.criteria)


def merged_truncated(
    truncated: list[str], cut: list[str], view: TrajectoryView | None
) -> list[str]:
    """The response's ``truncated``: fields cut by size, then by the context budget (a
    trajectory's input and output are its ``messages``)."""
    names = ("messages" if view and n in ("input", "output") else n for n in cut)
    return [
        *truncated,
        *(n for n in dict.fromkeys(f"rollout.{n}" for n in names) if n not in truncated),
    ]
