"""What changed between two rubric versions (``GET /rubrics/diff``, ``amaris rubrics diff``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from amaris.models import CriterionPublic
from amaris.rubric.model import Criterion, RubricVersion


class CriterionChange(BaseModel):
    """A criterion present in both versions (same id) whose text or weight differs."""

    id: str
    is_anchor: bool
    before: CriterionPublic
    after: CriterionPublic


class RubricDiff(BaseModel):
    """Criteria of version ``b`` against version ``a``, matched by id; anchors first."""

    a: int
    b: int
    added: list[CriterionPublic] = Field(description="In b only, in b's order.")
    removed: list[CriterionPublic] = Field(description="In a only, in a's order.")
    changed: list[CriterionChange] = Field(description="Same id, other text or weight.")
    anchors_changed: bool = Field(
        description="Anchors are immutable within a lineage: true only across "
        "`amaris rubrics init` (a new lineage from the configuration)."
    )


def _public(c: Criterion) -> CriterionPublic:
    return CriterionPublic(
        id=c.id, text=c.text, weight=c.weight, is_anchor=c.is_anchor, findings=list(c.findings)
    )


def diff_rubrics(a: RubricVersion, b: RubricVersion) -> RubricDiff:
    """Added, removed and changed criteria (anchors and adaptive) from ``a`` to ``b``."""
    before = {c.id: c for c in a.criteria}
    after = {c.id: c for c in b.criteria}
    added = [_public(c) for c in b.criteria if c.id not in before]
    removed = [_public(c) for c in a.criteria if c.id not in after]
    changed = [
        CriterionChange(
            id=c.id, is_anchor=c.is_anchor, before=_public(before[c.id]), after=_public(c)
        )
        for c in b.criteria
        if c.id in before and (before[c.id].text, before[c.id].weight) != (c.text, c.weight)
    ]
    anchors_changed = any(c.is_anchor for c in [*added, *removed]) or any(
        c.is_anchor for c in changed
    )
    return RubricDiff(
        a=a.version,
        b=b.version,
        added=added,
        removed=removed,
        changed=changed,
        anchors_changed=anchors_changed,
    )
