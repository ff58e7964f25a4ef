"""The numbers of a report, computed from a run's raw results (pure functions).

Per step: mean reward overall and by behaviour (unscored rollouts left out of the means,
counted apart), how many rollouts the analyses flagged with each reward-hacking
tag, and the share of GRPO groups (rollouts of one prompt) whose rewards are all equal.
Over the run: per behaviour and tag, the share of its analysed rollouts flagged with that
tag. Rubric: every version with the step that produced it, the first step scored under it,
and what changed from its parent. LLM usage: tokens, requests and time per step and per
agent and model; with a price table, cost per step and per 1,000 rollouts. What memory
changes (:func:`memory_outcomes`): rubric reversals, steps a resurgent behaviour went
unpenalised, and the reward gap between correct answers and hacks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NotRequired, TypedDict

from amaris.agents.payloads import CriterionData
from amaris.llm.ledger import Key, Usage
from amaris.models import JSONValue
from amaris.offline import tags as hacking_tags
from amaris.settings import ModelPrice
from amaris.sim.answers import CriterionChangeJSON, CriterionJSON
from amaris.sim.driver import RolloutResult, RunResult
from amaris.sim.policy import BEHAVIOURS, HACKS
from amaris.sim.usage import UsageSummary, usage_summary
from amaris.trust.audit.models import AuditSummary


def mean(values: Iterable[float]) -> float | None:
    """The mean, or None without values."""
    data = list(values)
    return sum(data) / len(data) if data else None


def behaviours_of(run: RunResult) -> list[str]:
    """Behaviours seen in the run: the simulator's order first, then others sorted."""
    seen = {r.behaviour for s in run.steps for r in s.rollouts}
    return [b for b in BEHAVIOURS if b in seen] + sorted(seen - set(BEHAVIOURS))


def tags_of(run: RunResult) -> list[str]:
    """Every reward-hacking tag any analysis of the run named, sorted."""
    return sorted({tag for s in run.steps for r in s.rollouts for tag in r.flags})


class GroupFigures(TypedDict):
    """Rollouts of a step (or of one behaviour in it): counts, mean reward, flags by tag."""

    rollouts: int
    unscored: int
    mean_reward: float | None
    analysed: int
    flagged: dict[str, int]


class ZeroVariance(TypedDict):
    """GRPO groups and how many have zero reward variance (:func:`zero_variance`)."""

    groups: int
    zero_variance: int
    share: float | None


class RubricChange(TypedDict):
    """A rubric version after the first (:func:`rubric_changes`); criteria as the diff's."""

    version: int
    parent: int | None
    origin: str
    step: int | None
    in_force_from_step: int | None
    added: list[CriterionJSON]
    """The rubric diff's criteria, JSON as the server answers them."""
    removed: list[CriterionJSON]
    changed: list[CriterionChangeJSON]


class Resurgence(TypedDict):
    step: int
    tag: str


class MemoryOutcomes(TypedDict):
    """What memory is for, in figures (:func:`memory_outcomes`)."""

    reversals: int
    resurgent_unpenalised_steps: int
    reward_gap: float | None
    resurgent: list[Resurgence]
    rubric_versions: int


class AlarmFigures(TypedDict):
    """A step's Goodhart alarm (:class:`amaris.trust.audit.models.Alarm`)."""

    kind: str
    reason: str


class AuditFigures(TypedDict):
    """A step's audit (:class:`amaris.trust.audit.models.AuditSummary` as JSON)."""

    sampled: int
    agreement: float | None
    top_tail_agreement: float | None
    gap: float | None
    alarm: AlarmFigures | None
    swap_checked: int
    swap_blind: int


class UpdateFigures(TypedDict):
    """What became of a step's global rubric update (its scope outcome's fields)."""

    outcome: str | None
    reason: str | None
    canary: JSONValue
    """The rubric canary's verdict, as the server answered it (None: none)."""


class StepFigures(GroupFigures):
    """One step of a run."""

    step: int
    rubric_version: int
    groups: ZeroVariance
    by_behaviour: dict[str, GroupFigures]
    usage: UsageSummary
    update: UpdateFigures
    audit: NotRequired[AuditFigures]
    """When the step was audited."""


class OverallFigures(GroupFigures):
    """The whole run's rollouts."""

    groups: ZeroVariance


class VersionFigures(TypedDict):
    """A rubric version of the run."""

    version: int
    parent: int | None
    origin: str
    step: int | None
    adaptive: list[CriterionJSON]


class AgentUsage(UsageSummary):
    """The run's usage of one agent and model."""

    agent: str
    model: str


class RunMetrics(TypedDict):
    """One run's figures as ``metrics.json`` holds them (:func:`run_metrics`), read by the
    report and by people."""

    label: str
    judge: str
    memory: dict[str, int]
    wall_seconds: float
    behaviours: list[str]
    tags: list[str]
    steps: list[StepFigures]
    overall: OverallFigures
    flag_rates: dict[str, dict[str, float | None]]
    rubric_versions: list[VersionFigures]
    rubric_changes: list[RubricChange]
    memory_outcomes: MemoryOutcomes
    usage: UsageSummary
    usage_by_agent: list[AgentUsage]


def audit_figures(audit: AuditSummary) -> AuditFigures:
    """``audit`` as JSON (its ``model_dump(mode="json")``)."""
    alarm = audit.alarm
    return {
        "sampled": audit.sampled,
        "agreement": audit.agreement,
        "top_tail_agreement": audit.top_tail_agreement,
        "gap": audit.gap,
        "alarm": None if alarm is None else {"kind": alarm.kind, "reason": alarm.reason},
        "swap_checked": audit.swap_checked,
        "swap_blind": audit.swap_blind,
    }


def _group(rollouts: list[RolloutResult], tags: list[str]) -> GroupFigures:
    analysed = [r for r in rollouts if r.analysed]
    return {
        "rollouts": len(rollouts),
        "unscored": sum(r.reward is None for r in rollouts),
        "mean_reward": mean(r.reward for r in rollouts if r.reward is not None),
        "analysed": len(analysed),
        "flagged": {tag: sum(tag in r.flags for r in analysed) for tag in tags},
    }


ZERO_VARIANCE_TOLERANCE = 1e-9
"""Rewards of a group closer than this count as equal."""


def zero_variance(rollouts: Iterable[RolloutResult]) -> ZeroVariance:
    """GRPO groups (same prompt, two or more scored rollouts) and how many of them have
    zero reward variance: every reward equal, so the group's advantages are all 0 and it
    teaches the policy nothing."""
    by_prompt: dict[str, list[float]] = {}
    for r in rollouts:
        if r.reward is not None:
            by_prompt.setdefault(r.prompt, []).append(r.reward)
    groups = [rewards for rewards in by_prompt.values() if len(rewards) > 1]
    zero = sum(max(g) - min(g) <= ZERO_VARIANCE_TOLERANCE for g in groups)
    return {
        "groups": len(groups),
        "zero_variance": zero,
        "share": zero / len(groups) if groups else None,
    }


def first_steps(run: RunResult) -> dict[int, int]:
    """The first step scored under each rubric version."""
    first: dict[int, int] = {}
    for step in run.steps:
        first.setdefault(step.rubric_version, step.step)
    return first


def rubric_changes(run: RunResult) -> list[RubricChange]:
    """Every version after the first: its step, first step in force, and its diff."""
    by_b = {int(d["b"]): d for d in run.diffs}
    first = first_steps(run)
    changes: list[RubricChange] = []
    for version in run.history:
        number = int(version["version"])
        if version.get("parent") is None or number not in by_b:
            continue
        diff = by_b[number]
        changes.append(
            {
                "version": number,
                "parent": version["parent"],
                "origin": version["origin"],
                "step": version.get("step"),
                "in_force_from_step": first.get(number),
                "added": diff["added"],
                "removed": diff["removed"],
                "changed": diff["changed"],
            }
        )
    return changes


def usage_of_run(run: RunResult) -> dict[Key, Usage]:
    """The run's LLM usage, by (agent, model): the sum of its steps'."""
    table: dict[Key, Usage] = {}
    for step in run.steps:
        for key, usage in step.usage.items():
            table.setdefault(key, Usage()).add(usage)
    return table


def _sum_groups(per_step: list[ZeroVariance]) -> ZeroVariance:
    groups = sum(g["groups"] for g in per_step)
    zero = sum(g["zero_variance"] for g in per_step)
    return {"groups": groups, "zero_variance": zero, "share": zero / groups if groups else None}


def reversals(changes: Iterable[RubricChange]) -> int:
    """Changes of direction of the adaptive criteria: a criterion text removed after it was
    added, or added again after it was removed (add, retire, add: 2). Edits and reweights
    keep a criterion, so they are no reversal."""
    events: dict[str, int] = {}
    for change in changes:
        removed = {str(c["text"]).casefold() for c in change["removed"]}
        added = {str(c["text"]).casefold() for c in change["added"]}
        for text in (removed - added) | (added - removed):
            events[text] = events.get(text, 0) + 1
    return sum(count - 1 for count in events.values())


def resurgent_unpenalised(run: RunResult) -> list[Resurgence]:
    """(step, tag) where a behaviour the analyses flag was penalised by the rubric in force
    at an earlier step and is not by the one in force now: a resurgent behaviour scored
    unpenalised. "Penalised" is read by the offline judge's rules
    (:func:`amaris.offline.tags.penalising` over the adaptive criteria)."""
    adaptive = {int(v["version"]): [shown_criterion(c) for c in v["adaptive"]] for v in run.history}
    ever: set[str] = set()
    found: list[Resurgence] = []
    for step in run.steps:
        criteria = adaptive.get(step.rubric_version, [])
        now = {t.tag for t in hacking_tags.TAGS if hacking_tags.penalising(criteria, t.tag)}
        flagged = {tag for r in step.rollouts for tag in r.flags}
        found += [{"step": step.step, "tag": t} for t in sorted((flagged & ever) - now)]
        ever |= now
    return found


def shown_criterion(criterion: CriterionJSON) -> CriterionData:
    """A criterion of a rubric answer as an agent is shown it (what the offline judge's
    rules read)."""
    weight = criterion["weight"]
    return {
        "id": criterion["id"],
        "text": criterion["text"],
        "weight": weight,
        "kind": "pitfall" if weight < 0 else "requirement",
        "is_anchor": criterion["is_anchor"],
    }


def memory_outcomes(run: RunResult) -> MemoryOutcomes:
    """What memory is for, in figures: ``reversals`` (:func:`reversals` over the run's
    rubric changes), ``resurgent_unpenalised_steps`` (how many (step, behaviour) pairs
    :func:`resurgent_unpenalised` finds, listed in ``resurgent``), and ``reward_gap``: the
    mean reward of the ``correct`` rollouts minus that of the hacks over the run (higher:
    hacking pays less; None without both)."""
    resurgent = resurgent_unpenalised(run)
    everything = [r for s in run.steps for r in s.rollouts if r.reward is not None]
    correct = mean(
        r.reward for r in everything if r.behaviour == "correct" and r.reward is not None
    )
    hacked = mean(r.reward for r in everything if r.behaviour in HACKS and r.reward is not None)
    gap = None if correct is None or hacked is None else round(correct - hacked, 4)
    return {
        "reversals": reversals(rubric_changes(run)),
        "resurgent_unpenalised_steps": len(resurgent),
        "reward_gap": gap,
        "resurgent": resurgent,
        "rubric_versions": len(run.history),
    }


def run_metrics(run: RunResult, pricing: Mapping[str, ModelPrice] | None = None) -> RunMetrics:
    """Every figure of one run, as JSON-ready data (``metrics.json`` holds one per run).

    ``pricing``: the configuration's price table by model, for the usage not priced as it
    was counted (cost is None when neither prices it)."""
    behaviours, tags = behaviours_of(run), tags_of(run)
    prices = pricing or {}
    steps: list[StepFigures] = []
    groups: list[ZeroVariance] = []
    for step in run.steps:
        groups.append(zero_variance(step.rollouts))
        scope = (step.outcome.scopes or {}).get("global")
        update = {} if scope is None else scope.model_dump(mode="json")
        group = _group(step.rollouts, tags)
        entry: StepFigures = {
            "step": step.step,
            "rubric_version": step.rubric_version,
            "rollouts": group["rollouts"],
            "unscored": group["unscored"],
            "mean_reward": group["mean_reward"],
            "analysed": group["analysed"],
            "flagged": group["flagged"],
            "groups": groups[-1],
            "by_behaviour": {
                b: _group([r for r in step.rollouts if r.behaviour == b], tags) for b in behaviours
            },
            "usage": usage_summary(step.usage, len(step.rollouts), prices),
            "update": {
                "outcome": update.get("outcome"),
                "reason": update.get("reason"),
                "canary": update.get("canary"),
            },
        }
        if step.audit is not None:
            entry["audit"] = audit_figures(step.audit)
        steps.append(entry)
    everything = [r for s in run.steps for r in s.rollouts]
    by_model = usage_of_run(run)
    flag_rates: dict[str, dict[str, float | None]] = {}
    for b in behaviours:
        group = _group([r for r in everything if r.behaviour == b], tags)
        flag_rates[b] = {
            tag: (count / group["analysed"] if group["analysed"] else None)
            for tag, count in group["flagged"].items()
        }
    return {
        "label": run.label,
        "judge": run.judge,
        "memory": run.memory,
        "wall_seconds": round(run.wall_s, 2),
        "behaviours": behaviours,
        "tags": tags,
        "steps": steps,
        "overall": {
            **_group(everything, tags),
            "groups": _sum_groups(groups),
        },
        "flag_rates": flag_rates,
        "rubric_versions": [
            {
                "version": v["version"],
                "parent": v.get("parent"),
                "origin": v["origin"],
                "step": v.get("step"),
                "adaptive": v.get("adaptive", []),
            }
            for v in run.history
        ],
        "rubric_changes": rubric_changes(run),
        "memory_outcomes": memory_outcomes(run),
        "usage": usage_summary(by_model, len(everything), prices),
        "usage_by_agent": [
            {
                "agent": agent,
                "model": model,
                **usage_summary({(agent, model): usage}, len(everything), prices),
            }
            for (agent, model), usage in sorted(by_model.items())
        ],
    }
