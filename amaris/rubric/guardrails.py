"""Guardrails: apply an updater's proposal to the adaptive rubric, or reject it.

amaris, not the LLM, computes the new adaptive set from the proposed
modifications and validates it before it can become a rubric version. The checks are of
counts and bounds, and of meaning:

* **Polarity is fixed at creation.** A criterion is a requirement (weight > 0) or a
  pitfall (weight < 0) for life: a reweight keeps its sign, and an added criterion that
  restates a criterion of the current rubric (same text, or a near-duplicate) with the
  other polarity is refused (a retire plus an add cannot flip it either).
* **An edit that changes a criterion's meaning is a retire plus an add**, checked as
  such (a new id, two modifications of the budget, the add's checks). It changes its
  meaning when the number of negation cues flips parity ("flatters" -> "does not
  flatter"), or when the similarity of the old and new text is below
  ``Bounds.edit_similarity``.
* **Near-duplicates are caught by meaning**: an added or edited criterion whose cosine
  similarity to another criterion (anchors included) reaches
  ``Bounds.duplicate_similarity`` is refused, besides exact (case-folded) copies.

An added or edited criterion keeps the findings its modification cites
(:attr:`Criterion.findings`: an edit replaces them, a reweight keeps them); what they must
be is :mod:`amaris.rubric.support`'s check.

The similarity comes from an :data:`Embed` port (the memory's embedder, passed in by the
caller), so this module stays pure; without one only exact text is compared and only the
negation flip marks a change of meaning.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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
    @property
    def findings(self) -> Sequence[str]: ...


Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]
"""Unit vectors of texts, in order (the memory embedder's ``embed``; blocking)."""


@dataclass(frozen=True)
class Bounds:
    """Limits an update must respect (``pipeline.*`` settings)."""

    max_adaptive: int
    min_weight: float
    max_weight: float
    max_modifications: int
    duplicate_similarity: float = 0.85
    """Cosine similarity from which two criteria are duplicates
    (``pipeline.duplicate_similarity``)."""
    edit_similarity: float = 0.5
    """Cosine similarity of an edit's old and new text below which the edit changes the
    criterion's meaning (``pipeline.edit_similarity``)."""


class UpdateRejected(ValueError):
    """The proposal breaks a guardrail; the message says which."""


@dataclass(frozen=True)
class AppliedUpdate:
    """The adaptive set after a valid proposal."""

    adaptive: tuple[Criterion, ...]
    next_adaptive_id: int
    changed: bool


_NEGATIONS = frozenset(
    {
        *("not", "no", "never", "nor", "neither", "none", "without", "cannot"),
        *("avoid", "avoids", "avoiding", "refrain", "refrains", "lack", "lacks", "lacking"),
        *("omit", "omits", "omitting", "fail", "fails", "failing", "absence"),
    }
)
"""Negation cues (the offline judge's, as single words); ``n't`` endings count too."""


def negations(text: str) -> int:
    """Negation cues in ``text``: one pass over its words (linear in its length)."""
    folded = text.casefold().replace("\u2019", "'")
    words = "".join(ch if ch.isalnum() or ch == "'" else " " for ch in folded).split()
    return sum(1 for w in words if w in _NEGATIONS or w.endswith("n't"))


def polarity(criterion: Criterion) -> int:
    """+1 when meeting the criterion's plain statement raises the reward, -1 when it lowers
    it: the weight's sign, reversed by an odd number of negation cues."""
    sign = 1 if criterion.weight > 0 else -1
    return -sign if negations(criterion.text) % 2 else sign


class _Similarity:
    """Cosine similarities of the texts of one update, embedded in one call when the first
    is asked for (an update that adds and edits nothing embeds nothing)."""

    def __init__(self, embed: Embed | None, texts: Sequence[str]) -> None:
        self._embed = embed
        self._texts = list(dict.fromkeys(t for t in texts if t))
        self._vectors: dict[str, list[float]] | None = None

    def __call__(self, a: str, b: str) -> float | None:
        """The cosine of ``a`` and ``b``; None without an embedder."""
        if self._vectors is None:
            embed, unique = self._embed, self._texts
            self._vectors = (
                dict(zip(unique, (list(v) for v in embed(unique)), strict=True))
                if embed is not None and unique
                else {}
            )
        va, vb = self._vectors.get(a), self._vectors.get(b)
        if va is None or vb is None:
            return None
        norm = math.sqrt(sum(x * x for x in va)) * math.sqrt(sum(y * y for y in vb))
        return sum(x * y for x, y in zip(va, vb, strict=True)) / norm if norm else 0.0


def apply_modifications(
    current: RubricVersion,
    modifications: Sequence[Modification],
    bounds: Bounds,
    embed: Embed | None = None,
) -> AppliedUpdate:
    """Apply ``modifications`` to ``current``'s adaptive criteria and validate the result.

    Args:
        embed: The memory embedder's ``embed``: near-duplicates and changes of meaning by
            similarity. None = exact duplicates and negation flips only.

    Raises:
        UpdateRejected: an anchor is targeted, an id is unknown, a criterion is empty or
            duplicated (by text or meaning), a reweight or a re-add flips a polarity, or
            the count or a weight leaves its bounds.
    """
    if len(modifications) > bounds.max_modifications:
        raise UpdateRejected(
            f"{len(modifications)} modifications; at most {bounds.max_modifications} allowed"
        )
    similarity = _Similarity(
        embed,
        [c.text for c in current.criteria] + [(m.text or "").strip() for m in modifications],
    )
    anchor_ids = {c.id for c in current.anchors}
    adaptive = {c.id: c for c in current.adaptive}
    order = [c.id for c in current.adaptive]
    next_id = current.next_adaptive_id
    added: set[str] = set()
    edited: set[str] = set()
    split_edits: list[str] = []

    def add(text: str, weight: float, findings: Sequence[str]) -> None:
        nonlocal next_id
        new_id = f"R{next_id}"
        next_id += 1
        adaptive[new_id] = Criterion(
            id=new_id, text=text, weight=weight, is_anchor=False, findings=tuple(findings)
        )
        order.append(new_id)
        added.add(new_id)

    for index, mod in enumerate(modifications):
        where = f"rubric_modifications[{index}] ({mod.action})"
        if mod.criterion_id is not None and mod.criterion_id in anchor_ids:
            raise UpdateRejected(f"{where}: anchor {mod.criterion_id} is immutable")
        if mod.action == "add":
            text = (mod.text or "").strip()
            if not text or mod.weight is None:
                raise UpdateRejected(f"{where}: needs text and weight")
            add(text, mod.weight, mod.findings)
            continue
        if mod.criterion_id is None or mod.criterion_id not in adaptive:
            raise UpdateRejected(f"{where}: unknown adaptive criterion {mod.criterion_id!r}")
        old = adaptive[mod.criterion_id]
        if mod.action == "edit":
            text = (mod.text or "").strip()
            if not text:
                raise UpdateRejected(f"{where}: empty text")
            if _changes_meaning(old.text, text, similarity, bounds):
                # Checked as what it is: the old criterion retired, a new one added.
                del adaptive[old.id]
                order.remove(old.id)
                edited.discard(old.id)
                add(text, old.weight, mod.findings)
                split_edits.append(old.id)
            else:
                # An edit rests on what it cites now; a reweight keeps what the text rests on.
                update = {"text": text, "findings": tuple(mod.findings)}
                adaptive[old.id] = old.model_copy(update=update)
                edited.add(old.id)
        elif mod.action == "reweight":
            if mod.weight is None:
                raise UpdateRejected(f"{where}: needs a weight")
            if mod.weight * old.weight < 0:
                kind = "requirement" if old.weight > 0 else "pitfall"
                raise UpdateRejected(
                    f"{where}: {old.id} is a {kind}; a reweight keeps its sign "
                    f"({old.weight} -> {mod.weight}): polarity is fixed at creation"
                )
            adaptive[old.id] = old.model_copy(update={"weight": mod.weight})
        elif mod.action == "retire":
            del adaptive[old.id]
            order.remove(old.id)
            added.discard(old.id)
            edited.discard(old.id)
        else:
            raise UpdateRejected(f"{where}: unknown action")
    counted = len(modifications) + len(split_edits)
    if counted > bounds.max_modifications:
        raise UpdateRejected(
            f"{counted} modifications, counting the edit of {', '.join(split_edits)} that "
            f"changes its meaning as a retire and an add; at most {bounds.max_modifications} "
            "allowed"
        )
    result = tuple(adaptive[i] for i in order)
    _validate(current, result, bounds)
    _check_meaning(current, result, added, edited, similarity, bounds)
    return AppliedUpdate(
        adaptive=result, next_adaptive_id=next_id, changed=result != current.adaptive
    )


def _changes_meaning(old: str, new: str, similarity: _Similarity, bounds: Bounds) -> bool:
    if negations(old) % 2 != negations(new) % 2:
        return True
    score = similarity(old, new)
    return score is not None and score < bounds.edit_similarity


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


def _check_meaning(
    current: RubricVersion,
    adaptive: tuple[Criterion, ...],
    added: set[str],
    edited: set[str],
    similarity: _Similarity,
    bounds: Bounds,
) -> None:
    """Near-duplicates of what the update added or edited, and re-adds that flip a
    criterion of ``current``. Pairs the update did not touch are left as they are."""
    kept = (*current.anchors, *adaptive)
    for criterion in adaptive:
        if criterion.id not in added and criterion.id not in edited:
            continue
        for other in kept:
            if other.id == criterion.id:
                continue
            score = similarity(criterion.text, other.text)
            if score is not None and score >= bounds.duplicate_similarity:
                raise UpdateRejected(
                    f"{criterion.id}: duplicates {other.id} by meaning (similarity "
                    f"{score:.2f} >= {bounds.duplicate_similarity})"
                )
        if criterion.id not in added:
            continue
        for before in current.criteria:
            same = criterion.text.casefold() == before.text.casefold()
            score = similarity(criterion.text, before.text)
            near = same or (score is not None and score >= bounds.duplicate_similarity)
            if near and polarity(criterion) != polarity(before):
                raise UpdateRejected(
                    f"{criterion.id}: restates {before.id} with the opposite polarity: "
                    "polarity is fixed at creation"
                )
