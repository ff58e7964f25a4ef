"""Rubric versions: immutable sets of anchor and adaptive criteria."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from amaris.models import CriterionPublic, RubricPublic
from amaris.settings import RubricItem, RuleSpec

Origin = Literal["config", "updater", "rollback", "bootstrap"]
"""Where a version comes from; ``bootstrap``: ``amaris bootstrap`` (ranked examples)."""


class Criterion(BaseModel):
    """One criterion. ``weight < 0`` marks a pitfall: its presence lowers the reward."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[AR][0-9]+$")
    text: str = Field(min_length=1)
    weight: float
    is_anchor: bool
    rule: RuleSpec | None = None
    """A deterministic check amaris computes instead of asking the judge; None = judged."""
    findings: tuple[str, ...] = ()
    """The step findings the update that wrote it cited (behaviour tags, ``fidelity_alarm``,
    criterion ids); empty for criteria of the configuration and of older versions."""


class RubricVersion(BaseModel):
    """An immutable rubric version. Never edited once published."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(ge=1)
    scope: str = "global"
    parent: int | None = None
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    step: int | None = None
    origin: Origin
    anchors: tuple[Criterion, ...]
    adaptive: tuple[Criterion, ...] = ()
    next_adaptive_id: int = Field(default=1, ge=1)
    """Ids of retired adaptive criteria are never reused."""

    @property
    def criteria(self) -> tuple[Criterion, ...]:
        """Anchors first, then adaptive criteria: the order the judge sees."""
        return self.anchors + self.adaptive

    @property
    def judged(self) -> tuple[Criterion, ...]:
        """The criteria the judge is asked about (the others are rules), in rubric order."""
        return tuple(c for c in self.criteria if c.rule is None)

    def public(self) -> RubricPublic:
        """The API view of this version."""

        def pub(c: Criterion) -> CriterionPublic:
            return CriterionPublic(
                id=c.id,
                text=c.text,
                weight=c.weight,
                is_anchor=c.is_anchor,
                rule=None if c.rule is None else c.rule.model_dump(mode="json"),
                findings=list(c.findings),
            )

        return RubricPublic(
            version=self.version,
            parent=self.parent,
            created_at=self.created_at,
            step=self.step,
            origin=self.origin,
            anchors=[pub(c) for c in self.anchors],
            adaptive=[pub(c) for c in self.adaptive],
        )


def anchors_from_config(items: Sequence[RubricItem]) -> tuple[Criterion, ...]:
    """Anchor criteria ``A1..An`` in config order."""
    return tuple(
        Criterion(id=f"A{i}", text=item.text, weight=item.weight, is_anchor=True, rule=item.rule)
        for i, item in enumerate(items, start=1)
    )


def adaptive_from_config(items: Sequence[RubricItem]) -> tuple[Criterion, ...]:
    """Initial adaptive criteria ``R1..Rn`` in config order."""
    return tuple(
        Criterion(id=f"R{i}", text=item.text, weight=item.weight, is_anchor=False, rule=item.rule)
        for i, item in enumerate(items, start=1)
    )
