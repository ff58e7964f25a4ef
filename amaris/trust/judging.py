"""What the mechanisms ask of a judge: one rollout judged under a rubric version.

The judge is the hot path's :class:`~amaris.scoring.scorer.Scorer` (the training judge's
endpoint, or the auditor's), typed here by what is called: the scorer's package is above
this one, because its hot path runs the pre-check.
"""

from __future__ import annotations

from typing import Protocol

from amaris.models import CriterionResult, ScoreRequest
from amaris.rubric.model import RubricVersion


class JudgeRefusedError(Exception):
    """The judge refused a request before judging it (a field over its limit, too many
    calls pending): no verdict, and nothing was asked. The scorer's refusals
    (:mod:`amaris.scoring.refusals`) are of this kind."""


class Judged(Protocol):
    """The judge's answer on one rollout."""

    @property
    def breakdown(self) -> tuple[CriterionResult, ...] | None:
        """One verdict per criterion of the rubric, in its order; None: not judged."""
        ...

    @property
    def failure(self) -> str | None:
        """``<kind>: <error>`` when not judged."""
        ...


class Judge(Protocol):
    """A judge of rollouts under a rubric version."""

    async def judge(self, request: ScoreRequest, rubric: RubricVersion | None = None) -> Judged:
        """The verdicts on ``request``'s rollout under ``rubric``; a judge failure is an
        answer with a ``failure`` and no breakdown, a refusal raises
        :class:`JudgeRefusedError`."""
        ...
