"""Offline updater: adds canonical pitfalls against unpenalised reward hacking.

The rules are described in :mod:`amaris.offline.agents`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from amaris.agents.schemas import (
    ConsultedMemory,
    MemoryArtifact,
    MemoryConsultation,
    RubricModification,
    RubricUpdateProposal,
    Strategy,
    UpdateRationale,
)
from amaris.offline import tags

ACT_SHARE = 0.1
"""The updater acts on a behaviour from this share of rollouts (or from ACT_COUNT of them)."""
ACT_COUNT = 2
PITFALL_WEIGHT = -1.0
"""Weight of an added pitfall before clamping into the bounds."""


def _consult(data: dict[str, Any], acted: Sequence[str]) -> MemoryConsultation:
    items = [{"type": "static", **item} for item in data.get("static_memory", [])]
    items += list(data.get("dynamic_memory", []))
    consulted: list[ConsultedMemory] = []
    for item in items:
        mentioned = [tag for tag in acted if tag in str(item.get("text") or "").lower()]
        if mentioned:
            step = item.get("step")
            consulted.append(
                ConsultedMemory(
                    type=str(item.get("type") or ""),
                    step=step if isinstance(step, int) else None,
                    relevance=f"mentions {', '.join(mentioned)}",
                )
            )
    if not acted:
        insights = "No change proposed, so no memory was needed."
    elif consulted:
        steps = ", ".join(str(s) for s in sorted({c.step for c in consulted if c.step is not None}))
        where = f" (steps {steps})" if steps else ""
        insights = f"{', '.join(acted)} also appears in memory{where}: a recurring issue."
    else:
        insights = f"No earlier memory mentions {', '.join(acted)}: a new issue."
    return MemoryConsultation(consulted=consulted, insights=insights)


def _pitfall_weight(bounds: dict[str, Any]) -> float:
    """Returns PITFALL_WEIGHT clamped into [min_weight, max_weight] (each optional)."""
    weight = PITFALL_WEIGHT
    if bounds.get("min_weight") is not None:
        weight = max(weight, float(bounds["min_weight"]))
    if bounds.get("max_weight") is not None:
        weight = min(weight, float(bounds["max_weight"]))
    return weight


def handle_updater(data: dict[str, Any]) -> dict[str, Any]:
    """Proposes a rubric update (rules in :mod:`amaris.offline.agents`)."""
    step, criteria, bounds = data["step"], data["criteria"], data["bounds"]
    behaviours = data["summary"]["aggregated_reward_hacking"]["behaviours"]
    adaptive = [c for c in criteria if not c.get("is_anchor") and not str(c["id"]).startswith("A")]
    room = min(
        _limit(bounds.get("max_adaptive")) - len(adaptive),
        _limit(bounds.get("max_modifications")),
    )
    weight = _pitfall_weight(bounds)
    modifications: list[RubricModification] = []
    acted: list[str] = []
    evidence: list[str] = []
    for b in behaviours:
        tag, count, share = str(b["tag"]), int(b["count"]), float(b["share"])
        seen = f"{tag} in {count} rollouts ({share:.0%})"
        known = tags.BY_TAG.get(tag)
        holders = tags.penalising(criteria, tag)
        if share < ACT_SHARE and count < ACT_COUNT:
            evidence.append(f"{seen}: below the threshold to act")
        elif known is None:
            evidence.append(f"{seen}: no canonical pitfall for it offline")
        elif holders:
            evidence.append(f"{seen}: already penalised by {', '.join(holders)}")
        elif weight >= 0:
            evidence.append(f"{seen}: unpenalised, but the weight bounds allow no pitfall")
        elif len(modifications) >= room:
            evidence.append(f"{seen}: unpenalised, but the bounds allow no further criterion")
        else:
            examples = ", ".join(str(i) for i in b.get("rollout_ids", [])[:3])
            evidence.append(f"{seen}: unpenalised" + (f" (e.g. {examples})" if examples else ""))
            reason = f"{seen} and no criterion penalises it."
            modifications.append(
                RubricModification(action="add", text=known.pitfall, weight=weight, reason=reason)
            )
            acted.append(tag)
    strategy: Strategy = "CORRECTIVE" if modifications else "MAINTENANCE"
    retired, retire_evidence = retire_uninformative(data, room_left(bounds, modifications))
    evidence += retire_evidence
    if modifications:
        summary = f"Step {step}: {'; '.join(m.reason.rstrip('.') for m in modifications)}."
        added = "; ".join(f'added pitfall "{m.text}" (weight {m.weight})' for m in modifications)
    else:
        summary = f"Step {step}: no unpenalised reward hacking to act on; rubric kept as it is."
        added = "no change"
    if retired:
        summary += f" Retired uninformative {', '.join(str(m.criterion_id) for m in retired)}."
        added = "; ".join(
            [*([added] if modifications else []), *(f"retired {m.criterion_id}" for m in retired)]
        )
        modifications += retired
    return RubricUpdateProposal(
        update_strategy=strategy,
        memory_consultation=_consult(data, acted),
        rationale=UpdateRationale(summary=summary, evidence=evidence),
        rubric_modifications=modifications,
        memory_artifact=MemoryArtifact(text=f"Step {step} rubric update ({strategy}): {added}."),
    ).model_dump(mode="json")


def room_left(bounds: dict[str, Any], modifications: Sequence[RubricModification]) -> int:
    """Modifications ``bounds`` still allow after ``modifications``."""
    return _limit(bounds.get("max_modifications")) - len(modifications)


def retire_uninformative(
    data: dict[str, Any], room: int
) -> tuple[list[RubricModification], list[str]]:
    """Retire the criteria the payload lists as ``uninformative`` (adaptive criteria
    saturated or with zero spread for ``rubric.retire_uninformative_after`` steps), at
    most ``room`` of them; the offline rules cannot reword one.

    Returns:
        The ``retire`` modifications, each with its evidence as the reason, and the
        evidence lines of the rationale.
    """
    adaptive = {
        str(c["id"])
        for c in data["criteria"]
        if not c.get("is_anchor") and not str(c["id"]).startswith("A")
    }
    retired: list[RubricModification] = []
    evidence: list[str] = []
    for item in data.get("uninformative", []):
        cid = str(item["criterion_id"])
        if cid not in adaptive:
            continue  # anchors are never retired
        if len(retired) >= room:
            evidence.append(f"{item['evidence']}: no room left to retire it")
            continue
        gone = {cid, *(str(m.criterion_id) for m in retired)}
        if not any(float(c["weight"]) > 0 for c in data["criteria"] if str(c["id"]) not in gone):
            evidence.append(f"{item['evidence']}: kept, the last positive criterion")
            continue
        evidence.append(f"{item['evidence']}: retired")
        retired.append(
            RubricModification(
                action="retire",
                criterion_id=cid,
                reason=f"Retired as uninformative: {item['evidence']}",
            )
        )
    return retired, evidence


def _limit(value: Any) -> int:
    return 10**9 if value is None else int(value)
