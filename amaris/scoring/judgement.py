"""What judging one rollout gives back (:class:`Judgement`): a verdict per criterion of the
rubric, rule and judge alike, in its order, the turns the judge attributed them to (of a
trajectory) and the fields cut; or why there is none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from amaris.models import CriterionResult
from amaris.rubric.model import RubricVersion
from amaris.scoring.trajectory_view import TrajectoryView
from amaris.scoring.verdicts import combine, criterion_confidence


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

    @classmethod
    def of_samples(
        cls,
        rubric: RubricVersion,
        replies: int,
        samples: Mapping[str, Sequence[float]],
        reasons: Mapping[str, str],
        from_logprobs: int | None,
        margins: Mapping[str, Sequence[float]] | None = None,
        turns: dict[str, tuple[int, ...]] | None = None,
        listwise: bool = False,
    ) -> Judged:
        """The judged criteria's verdicts over ``replies`` replies: each criterion's values
        (``samples``, one a reply, combined), the first reply's ``reasons``, and the logprob
        ``margins`` where read; each criterion's confidence from them."""
        sampled = replies > 1
        combined = {c.id: combine(samples[c.id]) for c in rubric.judged}
        breakdown = tuple(
            CriterionResult(
                id=c.id,
                text=c.text,
                weight=c.weight,
                is_anchor=c.is_anchor,
                verdict=combined[c.id].mean,
                reason=reasons[c.id],
                samples=list(samples[c.id]) if sampled else None,
                agreement=combined[c.id].agreement if sampled else None,
                from_logprobs=from_logprobs,
            )
            for c in rubric.judged
        )
        margin = margins or {}
        confidence = {
            cid: criterion_confidence(list(margin.get(cid, ())), replies, found.agreement)
            for cid, found in combined.items()
        }
        return cls(breakdown=breakdown, turns=turns or {}, confidence=confidence, listwise=listwise)


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
