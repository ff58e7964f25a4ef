"""Guardrails: apply an updater's proposal to the adaptive rubric, or reject it.

amaris, not the LLM, computes the new adaptive set from the proposed
modifications and validates it before it can become a rubric version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from amaris.rubric.model import Criterion, RubricVersion


class Modification(Protocol):
    """One proposed change (``amaris.agents.schemas.RubricModification``)."""

    @property
    def action(self) -> str: ...
    @property
    def criterion_id(self) -> str | None: ...
    @property
    def text(self) -> str | None: ...
    @property
    def weight(self) -> float | None: ...


@dataclass(frozen=True)
class Bounds:
    """Limits an update must respect (``pipeline.*`` settings)."""

    max_adaptive: int
    min_weight: float
    max_weight: float
    max_modifications: int


class UpdateRejected(ValueError):
    """The proposal breaks a guardrail; the message says which."""


@dataclass(frozen=True)
class AppliedUpdate:
    """The adaptive set after a valid proposal."""

    adaptive: tuple[Criterion, ...]
    next_adaptive_id: int
    changed: bool


def apply_modifications(
    current: RubricVersion, modifications: Sequence[Modification], bounds: Bounds
) -> AppliedUpdate:
    """Apply ``modifications`` to ``current``'s adaptive criteria and validate the result.

    Raises:
        UpdateRejected: an anchor is targeted, an id is unknown, a criterion is empty or
            duplicated, or the count or a weight leaves its bounds.
    """
    if len(modifications) > bounds.max_modifications:
        raise UpdateRejected(
            f"{len(modifications)} modifications; at most {bounds.max_modifications} allowed"
        )
    anchor_ids = {c.id for c in current.anchors}
    adaptive = {c.id: c for c in current.adaptive}
    order = [c.id for c in current.adaptive]
    next_id = current.next_adaptive_id
    for index, mod in enumerate(modifications):
        where = f"rubric_modifications[{index}] ({mod.action})"
        if mod.criterion_id is not None and mod.criterion_id in anchor_ids:
            raise UpdateRejected(f"{where}: anchor {mod.criterion_id} is immutable")
        if mod.action == "add":
            text = (mod.text or "").strip()
            if not text or mod.weight is None:
                raise UpdateRejected(f"{where}: needs text and weight")
            new_id = f"R{next_id}"
            next_id += 1
            adaptive[new_id] = Criterion(id=new_id, text=text, weight=mod.weight, is_anchor=False)
            order.append(new_id)
            continue
        if mod.criterion_id is None or mod.criterion_id not in adaptive:
            raise UpdateRejected(f"{where}: unknown adaptive criterion {mod.criterion_id!r}")
        old = adaptive[mod.criterion_id]
        if mod.action == "edit":
            text = (mod.text or "").strip()
            if not text:
                raise UpdateRejected(f"{where}: empty text")
            adaptive[old.id] = old.model_copy(update={"text": text})
        elif mod.action == "reweight":
            if mod.weight is None:
                raise UpdateRejected(f"{where}: needs a weight")
            adaptive[old.id] = old.model_copy(update={"weight": mod.weight})
        elif mod.action == "retire":
            del adaptive[old.id]
            order.remove(old.id)
        else:
            raise UpdateRejected(f"{where}: unknown action")
    result = tuple(adaptive[i] for i in order)
    _validate(current, result, bounds)
    return AppliedUpdate(
        adaptive=result, next_adaptive_id=next_id, changed=result != current.adaptive
    )


def _validate(current: RubricVersion, adaptive: tuple[Criterion, ...], bounds: Bounds) -> None:
    if len(adaptive) > bounds.max_adaptive:
        raise UpdateRejected(
            f"{len(adaptive)} adaptive criteria; at most {bounds.max_adaptive} allowed"
        )
    seen = {c.text.casefold().strip() for c in current.anchors}
    for criterion in adaptive:
        if not criterion.text.strip():
            raise UpdateRejected(f"{criterion.id}: empty criterion")
        if criterion.weight == 0 or not bounds.min_weight <= criterion.weight <= bounds.max_weight:
            raise UpdateRejected(
                f"{criterion.id}: weight {criterion.weight} outside "
                f"[{bounds.min_weight}, {bounds.max_weight}] or zero"
            )
        key = criterion.text.casefold().strip()
        if key in seen:
            raise UpdateRejected(f"{criterion.id}: duplicates another criterion")
        seen.add(key)
    weights = [c.weight for c in (*current.anchors, *adaptive)]
    if not any(w > 0 for w in weights):
        raise UpdateRejected("no criterion with a positive weight would remain")
