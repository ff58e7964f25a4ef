"""Offline summarizer and meta-summarizer (the rules are described in amaris.offline.agents)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from amaris.agents.payloads import MetaSummarizerData, SummarizerData, SummaryData
from amaris.agents.schemas import (
    AggregatedBehaviour,
    AggregatedHackingAnalysis,
    BatchSummary,
    ExecutiveSummary,
    IndividualAnalysis,
    MemoryEntry,
    PerformanceAdvancementAnalysis,
    RubricEvolutionPlan,
    RubricMetaEvaluation,
    SystemicPattern,
)
from amaris.offline import tags

Section = Literal[
    "executive_summary",
    "rubric_meta_evaluation",
    "performance_advancement_analysis",
    "rubric_evolution_plan",
]
"""A free-text section of a summary (:class:`~amaris.agents.payloads.SectionData`)."""
ListKey = Literal["gaps", "recommendations"]
TextKey = Literal["summary", "notes"]

MAX_IDS = 10
"""Rollout ids kept per behaviour or pattern."""
RECOMMEND_SHARE = 0.1
"""From this share of rollouts a rubric gap is worth a recommendation."""
HEALTHY_MEAN = 0.6
"""A step with no significant hacking is "healthy" from this mean reward, else "struggling"."""
WRONG_ANSWERS = "Wrong final answers (poor quality)"


def fmt(value: float | None) -> str:
    """Returns a reward with two decimals, or "n/a"."""
    return "n/a" if value is None else f"{value:.2f}"


def hacking_pattern(tag: str, description: str) -> str:
    """Returns the systemic-pattern text of a hacking behaviour (fixed, so chunks merge)."""
    return f"Reward hacking: {tags.describe(tag, description)} ({tag})"


@dataclass
class _Tally:
    """Rollouts showing one behaviour."""

    description: str = ""
    count: int = 0
    ids: list[str] = field(default_factory=list)


def _distinct(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


def _behaviours(tallies: dict[str, _Tally], total: int) -> list[AggregatedBehaviour]:
    # Most frequent first; dict order (first seen) breaks ties, so the result is deterministic.
    ordered = sorted(tallies.items(), key=lambda item: -item[1].count)
    return [
        AggregatedBehaviour(
            tag=tag,
            description=tags.describe(tag, tally.description),
            count=tally.count,
            share=min(1.0, tally.count / total) if total else 0.0,
            rollout_ids=tally.ids[:MAX_IDS],
        )
        for tag, tally in ordered
    ]


def _tag_patterns(behaviours: Sequence[AggregatedBehaviour]) -> list[SystemicPattern]:
    return [
        SystemicPattern(
            pattern=hacking_pattern(b.tag, b.description),
            frequency=b.count,
            rollout_ids=b.rollout_ids,
        )
        for b in behaviours
        if b.count >= 2
    ]


def _trend(mean: float | None, behaviours: Sequence[AggregatedBehaviour], default: str) -> str:
    if any(b.share >= RECOMMEND_SHARE for b in behaviours):
        return "hacking"
    if mean is None:
        return default
    return "healthy" if mean >= HEALTHY_MEAN else "struggling"


def _hacking_text(behaviours: Sequence[AggregatedBehaviour]) -> str:
    return ", ".join(f"{b.tag} ({b.share:.0%})" for b in behaviours) or "none"


def _recommendations(behaviours: Sequence[AggregatedBehaviour], gaps: Sequence[str]) -> list[str]:
    lowered = [gap.lower() for gap in gaps]
    return [
        f"Add a pitfall criterion against {b.tag}"
        for b in behaviours
        if b.share >= RECOMMEND_SHARE
        and any(b.tag in gap or b.description.lower() in gap for gap in lowered)
    ]


def _memory(
    step: int, mean: float | None, behaviours: Sequence[AggregatedBehaviour], gaps: Sequence[str]
) -> MemoryEntry:
    text = (
        f"Step {step}: mean reward {fmt(mean)}; reward hacking: {_hacking_text(behaviours)}; "
        f"gaps: {'; '.join(gaps) or 'none'}."
    )
    return MemoryEntry(text=text, keywords=[b.tag for b in behaviours])


def handle_summarizer(data: SummarizerData) -> BatchSummary:
    """Aggregates one step's analyses into a BatchSummary (rules in amaris.offline.agents)."""
    step, stats = data["step"], data["score_stats"]
    analyses = [IndividualAnalysis.model_validate(raw) for raw in data["analyses"]]
    total = len(analyses)
    mean = stats.get("mean")
    tallies: dict[str, _Tally] = {}
    poor: list[str] = []
    qualities: Counter[str] = Counter()
    next_steps: Counter[str] = Counter()
    over = under = 0
    for analysis in analyses:
        rollout_id = analysis.rollout_id
        for behaviour in analysis.reward_hacking_analysis.behaviours:
            tally = tallies.setdefault(behaviour.tag, _Tally())
            tally.description = tally.description or behaviour.description
            if rollout_id not in tally.ids:
                tally.count += 1
                tally.ids.append(rollout_id)
        quality = analysis.overall_assessment.quality
        qualities[quality] += 1
        if quality == "poor":
            poor.append(rollout_id)
        evaluation = analysis.rubric_evaluation
        over += evaluation.over_rewarded
        under += evaluation.under_rewarded
        next_steps.update(analysis.performance_advancement_strategy.next_steps)
    behaviours = _behaviours(tallies, total)
    patterns = _tag_patterns(behaviours)
    if len(poor) >= 2:
        patterns.append(
            SystemicPattern(pattern=WRONG_ANSWERS, frequency=len(poor), rollout_ids=poor[:MAX_IDS])
        )
    gaps = _distinct(gap for a in analyses for gap in a.rubric_evaluation.gaps)
    hacked = sum(1 for a in analyses if a.reward_hacking_analysis.behaviours)
    summary = (
        f"Step {step}: {total} rollouts analysed, mean reward {fmt(mean)} "
        f"(min {fmt(stats.get('min'))}, max {fmt(stats.get('max'))}). "
        f"Reward hacking in {hacked} of {total}: {_hacking_text(behaviours)}."
    )
    histogram = ", ".join(f"{q} {qualities[q]}" for q in ("excellent", "good", "fair", "poor"))
    advice = next_steps.most_common(1)
    progress = f"Quality: {histogram}." + (f" Most needed: {advice[0][0]}" if advice else "")
    return BatchSummary(
        executive_summary=ExecutiveSummary(
            summary=summary, trend=_trend(mean, behaviours, "unknown")
        ),
        systemic_patterns=patterns,
        aggregated_reward_hacking=AggregatedHackingAnalysis(
            detected=bool(behaviours), behaviours=behaviours
        ),
        rubric_meta_evaluation=RubricMetaEvaluation(
            gaps=gaps, notes=f"{over} of {total} rollouts over-rewarded, {under} under-rewarded."
        ),
        performance_advancement_analysis=PerformanceAdvancementAnalysis(summary=progress),
        rubric_evolution_plan=RubricEvolutionPlan(
            recommendations=_recommendations(behaviours, gaps)
        ),
        memory_entry=_memory(step, mean, behaviours, gaps),
    )


def summary_behaviours(summary: SummaryData) -> list[AggregatedBehaviour]:
    """The behaviours of a summary's JSON, each read through its model."""
    return [
        AggregatedBehaviour.model_validate(raw)
        for raw in summary["aggregated_reward_hacking"]["behaviours"]
    ]


def _chunk_size(behaviours: Sequence[AggregatedBehaviour]) -> int | None:
    """Rollouts in a chunk, from its first behaviour with a share (count / share)."""
    for behaviour in behaviours:
        if behaviour.share > 0:
            return round(behaviour.count / behaviour.share)
    return None


def handle_meta_summarizer(data: MetaSummarizerData) -> BatchSummary:
    """Merges chunk summaries into one BatchSummary (rules in amaris.offline.agents)."""
    step, chunks = data["step"], data["summaries"]
    found = [summary_behaviours(chunk) for chunk in chunks]
    stats = data.get("score_stats") or {}
    sizes = [_chunk_size(behaviours) for behaviours in found]
    known = [size for size in sizes if size is not None]
    # Chunks hold chunk_size rollouts except the last: the largest known size is the best guess.
    total = int(stats.get("count") or sum(size or max(known, default=0) for size in sizes))
    mean = stats.get("mean")
    tallies: dict[str, _Tally] = {}
    for chunk_behaviours in found:
        for behaviour in chunk_behaviours:
            tally = tallies.setdefault(behaviour.tag, _Tally())
            tally.description = tally.description or behaviour.description
            tally.count += behaviour.count
            tally.ids.extend(behaviour.rollout_ids)
    behaviours = _behaviours(tallies, total)
    patterns = _tag_patterns(behaviours)
    # Hacking patterns are recounted from the merged behaviours; the chunks' own are dropped.
    own = {hacking_pattern(tag, tally.description) for tag, tally in tallies.items()}
    merged: dict[str, SystemicPattern] = {}
    for chunk in chunks:
        for raw in chunk.get("systemic_patterns", []):
            pattern = SystemicPattern.model_validate(raw)
            if pattern.pattern in own:
                continue
            into = merged.setdefault(pattern.pattern, SystemicPattern(pattern=pattern.pattern))
            into.frequency += pattern.frequency
            into.rollout_ids = (into.rollout_ids + pattern.rollout_ids)[:MAX_IDS]
    patterns.extend(merged.values())

    def union(section: Section, key: ListKey) -> list[str]:
        return _distinct(str(item) for c in chunks for item in c.get(section, {}).get(key, []))

    def joined(section: Section, key: TextKey) -> str:
        return " ".join(_distinct(str(c.get(section, {}).get(key) or "") for c in chunks))

    gaps = union("rubric_meta_evaluation", "gaps")
    trends = Counter(str(c["executive_summary"].get("trend") or "") for c in chunks)
    trends.pop("", None)
    usual = trends.most_common(1)[0][0] if trends else "unknown"
    summary = (
        f"Step {step}: {len(chunks)} chunk summaries merged, about {total} rollouts, mean "
        f"reward {fmt(mean)}. Reward hacking: {_hacking_text(behaviours)}."
    )
    return BatchSummary(
        executive_summary=ExecutiveSummary(summary=summary, trend=_trend(mean, behaviours, usual)),
        systemic_patterns=patterns,
        aggregated_reward_hacking=AggregatedHackingAnalysis(
            detected=bool(behaviours), behaviours=behaviours
        ),
        rubric_meta_evaluation=RubricMetaEvaluation(
            gaps=gaps, notes=joined("rubric_meta_evaluation", "notes")
        ),
        performance_advancement_analysis=PerformanceAdvancementAnalysis(
            summary=joined("performance_advancement_analysis", "summary")
        ),
        rubric_evolution_plan=RubricEvolutionPlan(
            recommendations=_distinct(
                [
                    *_recommendations(behaviours, gaps),
                    *union("rubric_evolution_plan", "recommendations"),
                ]
            )
        ),
        memory_entry=_memory(step, mean, behaviours, gaps),
    )
