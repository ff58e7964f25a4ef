"""The server's answers the simulator reads, as JSON: the rubric endpoints' models
(:class:`amaris.models.RubricPublic`, :class:`amaris.rubric.diff.RubricDiff`) as
TypedDicts of the fields it reads. The answers stay the dicts the server sent, so what the
report copies from them (``metrics.json``) is the server's JSON as is."""

from __future__ import annotations

from typing import TypedDict


class CriterionJSON(TypedDict):
    """A criterion of a rubric answer (:class:`amaris.models.CriterionPublic`; its ``rule``,
    null for a judged criterion, is not read here)."""

    id: str
    text: str
    weight: float
    is_anchor: bool


class RubricJSON(TypedDict):
    """``GET /rubrics`` (the version in force) and each of ``GET /rubrics/history``."""

    version: int
    parent: int | None
    created_at: str
    step: int | None
    origin: str
    anchors: list[CriterionJSON]
    adaptive: list[CriterionJSON]


class CriterionChangeJSON(TypedDict):
    """A criterion whose text or weight changed (:class:`amaris.rubric.diff.CriterionChange`)."""

    id: str
    is_anchor: bool
    before: CriterionJSON
    after: CriterionJSON


class RubricDiffJSON(TypedDict):
    """``GET /rubrics/diff?a=&b=``."""

    a: int
    b: int
    added: list[CriterionJSON]
    removed: list[CriterionJSON]
    changed: list[CriterionChangeJSON]
    anchors_changed: bool


class HealthJSON(TypedDict, total=False):
    """What the simulator reads of ``GET /healthz``."""

    judge_backend: str
