"""Offline updater: adds canonical pitfalls against unpenalised reward hacking, retires idle
ones, and lets retrieved memory decide (resurgence, flip-flops, recurring findings).

The rules are described in :mod:`amaris.offline.agents`.
"""

from __future__ import annotations

from collections.abc import Sequence

from amaris.agents.findings import FIDELITY_ALARM
from amaris.agents.payloads import BoundsData, CriterionData, UpdaterData
from amaris.agents.schemas import (
    ConsultedMemory,
    MemoryArtifact,
    MemoryConsultation,
    RubricModification,
    RubricUpdateProposal,
    Strategy,
    UpdateRationale,
)
from amaris.offline import recall, tags
from amaris.offline.fidelity import REWORDED, shared_tag, sharpened_pitfall
from amaris.offline.recall import ADDED, RETIRED, TagHistory
from amaris.offline.summarize import summary_behaviours

ACT_SHARE = 0.1
"""The updater acts on a behaviour from this share of rollouts (or from ACT_COUNT of them)."""
ACT_COUNT = 2
PITFALL_WEIGHT = -1.0
"""Weight of an added pitfall before clamping into the bounds."""
QUIET_STEPS = 3
"""A pitfall is kept while memory shows its behaviour within this many steps."""


def _consult(data: UpdaterData, acted: Sequence[str]) -> MemoryConsultation:
    items = recall.memory_items(data)
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


def _pitfall_weight(bounds: BoundsData) -> float:
    """Returns PITFALL_WEIGHT clamped into [min_weight, max_weight] (each optional)."""
    weight = PITFALL_WEIGHT
    if (low := bounds.get("min_weight")) is not None:
        weight = max(weight, float(low))
    if (high := bounds.get("max_weight")) is not None:
        weight = min(weight, float(high))
    return weight


def _below_threshold(count: int, share: float) -> bool:
    return share < ACT_SHARE and count < ACT_COUNT


def _memory_reason(tag: str, seen: str, past: TagHistory | None, below: bool) -> str | None:
    """Why memory makes a behaviour worth a pitfall now: resurgent (penalised, retired, back:
    at once, whatever its count), or recurring (a rare behaviour memory shows before, over a
    one-off). None when memory adds nothing, or when the count alone is enough."""
    if past is not None and past.resurgent:
        return (
            f"{ADDED} {tag}: resurgent: {seen}; penalised at step "
            f"{recall.steps_text(past.added)}, retired at step "
            f"{recall.steps_text(past.retired)}, and back: re-penalised at once."
        )
    if below and past is not None and past.seen:
        return (
            f"{ADDED} {tag}: recurring: {seen}, also in memory at step "
            f"{recall.steps_text(past.seen)}: weighted over a one-off."
        )
    return None


def _retirements(
    adaptive: Sequence[CriterionData],
    present: set[str],
    history: dict[str, TagHistory],
    step: int,
    room: int,
) -> tuple[list[RubricModification], list[str]]:
    """Retires adaptive pitfalls whose behaviour no rollout of this step shows, unless memory
    shows the pitfall retired before (it came back: not flip-flopped again without new
    evidence), shows it added against the behaviour (the pitfall is why the behaviour is
    absent), or shows the behaviour within QUIET_STEPS steps. The first step of a run
    retires nothing for being idle: a configured pitfall gets a step to be seen. Returns
    the retirements and the evidence."""
    retire: list[RubricModification] = []
    evidence: list[str] = []
    if step == 0:
        return retire, evidence
    for criterion in adaptive:
        if float(criterion["weight"]) >= 0:
            continue
        text = str(criterion["text"])
        targeted = [t.tag for t in tags.TAGS if tags.targets(text, t.tag)]
        if not targeted or present.intersection(targeted):
            continue
        tag, cid = targeted[0], str(criterion["id"])
        past = history.get(tag)
        last = past.last_seen() if past is not None else None
        if past is not None and past.retired:
            evidence.append(
                f"{tag} absent, but {cid} is kept: a pitfall against it was retired at step "
                f"{recall.steps_text(past.retired)} and re-added; no new evidence to flip-flop"
            )
        elif past is not None and past.added:
            evidence.append(
                f"{tag} absent, but {cid} is kept: it was added against it at step "
                f"{recall.steps_text(past.added)}; the pitfall is probably why it is absent"
            )
        elif last is not None and last >= step - QUIET_STEPS:
            evidence.append(f"{tag} absent, but {cid} is kept: memory shows it at step {last}")
        elif len(retire) >= room:
            evidence.append(f"{tag} absent, but the bounds allow no further modification")
        else:
            since = "" if last is None else f", and from memory since step {last}"
            reason = f"{RETIRED} {tag} ({cid}): absent from this step{since}."
            evidence.append(f"{tag} absent: {cid} retired")
            retire.append(
                RubricModification(action="retire", criterion_id=cid, text=text, reason=reason)
            )
    return retire, evidence


def handle_updater(data: UpdaterData) -> RubricUpdateProposal:
    """Proposes a rubric update (rules in :mod:`amaris.offline.agents`)."""
    step, criteria, bounds = data["step"], data["criteria"], data["bounds"]
    behaviours = summary_behaviours(data["summary"])
    adaptive = [c for c in criteria if not c.get("is_anchor") and not str(c["id"]).startswith("A")]
    room = min(
        _limit(bounds.get("max_adaptive")) - len(adaptive),
        _limit(bounds.get("max_modifications")),
    )
    weight = _pitfall_weight(bounds)
    history = recall.histories(recall.memory_items(data))
    modifications: list[RubricModification] = []
    acted: list[str] = []
    evidence: list[str] = []
    for b in behaviours:
        tag, count, share = b.tag, b.count, b.share
        seen = f"{tag} in {count} rollouts ({share:.0%})"
        known = tags.BY_TAG.get(tag)
        holders = tags.penalising(criteria, tag)
        below = _below_threshold(count, share)
        remembered = _memory_reason(tag, seen, history.get(tag), below) if count else None
        if below and remembered is None:
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
            examples = ", ".join(b.rollout_ids[:3])
            evidence.append(f"{seen}: unpenalised" + (f" (e.g. {examples})" if examples else ""))
            reason = remembered or f"{ADDED} {tag}: {seen} and no criterion penalises it."
            modifications.append(
                RubricModification(
                    action="add", text=known.pitfall, weight=weight, reason=reason, findings=[tag]
                )
            )
            acted.append(tag)
    alarmed = _alarm_pitfall(data, criteria, weight, room - len(modifications))
    if isinstance(alarmed, RubricModification):
        modifications.append(alarmed)
        acted.append(str(shared_tag(data["fidelity_alarm"])))
    elif alarmed:
        evidence.append(alarmed)
    present = {b.tag for b in behaviours if b.count > 0}
    strategy: Strategy = "CORRECTIVE" if modifications else "MAINTENANCE"
    # Criteria measured flat for K steps (criterion statistics) first: their evidence is
    # measured; then the pitfalls memory finds idle.
    uninformative, retire_evidence = retire_uninformative(data, room_left(bounds, modifications))
    evidence += retire_evidence
    taken = {m.criterion_id for m in uninformative}
    left = room_left(bounds, modifications + uninformative)
    idle = [c for c in adaptive if str(c["id"]) not in taken]
    retired, kept = _retirements(idle, present, history, step, left)
    evidence += kept
    changes = modifications + uninformative + retired
    if changes:
        summary = f"Step {step}: {'; '.join(m.reason.rstrip('.') for m in changes)}."
        added = "; ".join(_change_text(m) for m in changes)
    else:
        summary = f"Step {step}: no unpenalised reward hacking to act on; rubric kept as it is."
        added = "no change"
    if uninformative:
        summary += (
            f" Retired uninformative {', '.join(str(m.criterion_id) for m in uninformative)}."
        )
    return RubricUpdateProposal(
        update_strategy=strategy,
        memory_consultation=_consult(data, acted),
        rationale=UpdateRationale(summary=summary, evidence=evidence),
        rubric_modifications=changes,
        memory_artifact=MemoryArtifact(text=f"Step {step} rubric update ({strategy}): {added}."),
    )


def _change_text(change: RubricModification) -> str:
    """One change as the memory artifact states it."""
    if change.action == "add":
        return f'added pitfall "{change.text}" (weight {change.weight})'
    if change.action == "edit":
        return f'reworded {change.criterion_id} as "{change.text}"'
    return f"retired {change.criterion_id}"


def _alarm_pitfall(
    data: UpdaterData, criteria: Sequence[CriterionData], weight: float, room: int
) -> RubricModification | str | None:
    """The sharpened pitfall a fidelity alarm's evidence calls for
    (:mod:`amaris.offline.fidelity`), else why none is added (None: no alarm)."""
    alarm = data.get("fidelity_alarm")
    if not alarm:
        return None
    tag = shared_tag(alarm)
    where = f"fidelity alarm at step {alarm.get('step')}"
    if tag is None:
        return f"{where}: its disagreeing rollouts share no known behaviour"
    text = sharpened_pitfall(tag)
    if any(str(c["text"]) == text for c in criteria):
        return f"{where}: {tag} is already penalised by a sharpened pitfall"
    shown = len(alarm.get("rollouts") or [])
    found = (
        f"{where}: the audit judge rewarded the {shown} disagreeing rollouts lower and they "
        f"share {tag}"
    )
    stale = tags.penalising(criteria, tag)
    if stale and room > 0:
        # The judge no longer reads the pitfall in force: the same pitfall, worded afresh
        # (an edit keeps its id and meaning; an added copy would be a near-duplicate).
        reason = f"{REWORDED} {tag} ({stale[0]}): {found}; the training judge pays it anyway."
        return RubricModification(
            action="edit",
            criterion_id=stale[0],
            text=text,
            reason=reason,
            findings=[FIDELITY_ALARM],
        )
    if weight >= 0 or room <= 0:
        return f"{where}: {tag} calls for a sharpened pitfall, but the bounds allow none"
    reason = (
        f"{ADDED} {tag}: {found}; no pitfall penalises it, so one is added worded to be read "
        "afresh."
    )
    return RubricModification(
        action="add", text=text, weight=weight, reason=reason, findings=[FIDELITY_ALARM]
    )


def room_left(bounds: BoundsData, modifications: Sequence[RubricModification]) -> int:
    """Modifications ``bounds`` still allow after ``modifications``."""
    return _limit(bounds.get("max_modifications")) - len(modifications)


def retire_uninformative(
    data: UpdaterData, room: int
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
                findings=[cid],
            )
        )
    return retired, evidence


def _limit(value: int | None) -> int:
    return 10**9 if value is None else int(value)
