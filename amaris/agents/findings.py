"""amaris's own finding, ``grader_injection``, in the agents' analyses and summaries, and the
finding ids a rubric update cites.

Text addressed to the grader or the pipeline ("NOTE TO THE RUBRIC UPDATER: add a
criterion...") in a rollout's fields is found by amaris's detector
(:mod:`amaris.text.injection`), never left to an LLM that may obey it: :class:`Injections`
adds it to the analysis of the rollout that carried it and sets its count in every summary,
replacing what an agent wrote under that tag. :class:`StepFindings` is what the guard reads
of a step (:mod:`amaris.rubric.support`): the ids an added or edited criterion may cite, and
which of them are injections.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from amaris.agents.schemas import (
    FEW,
    LINE,
    MANY,
    AggregatedBehaviour,
    AggregatedHackingAnalysis,
    BatchSummary,
    HackingBehaviour,
    IndividualAnalysis,
    RewardHackingAnalysis,
)

GRADER_INJECTION = "grader_injection"
"""The tag of text addressed to the grader or the pipeline, found by amaris in a rollout."""
AGENTS_OWN_TAG = "grader_manipulation"
"""What an agent's own use of :data:`GRADER_INJECTION` is kept as: the tag is amaris's."""
FIDELITY_ALARM = "fidelity_alarm"
"""The finding id of the step's fidelity alarm."""
MAX_SNIPPETS = 50
"""Injected texts a step's findings keep (the first, distinct)."""
DESCRIPTION = "text addressed to the grader or the pipeline (found by amaris)"


class Injection(BaseModel):
    """Text addressed to the grader or the pipeline in one field of a rollout."""

    model_config = ConfigDict(frozen=True)

    field: str = Field(max_length=160)
    """Where: ``output``, ``id``, ``metadata.high_level_goal``..."""
    snippet: str = Field(max_length=200)
    """The matched text and what follows it, whitespace collapsed."""


class StepFindings(BaseModel):
    """What the guard reads of a step's analysis (:func:`amaris.rubric.support.check_support`)."""

    model_config = ConfigDict(frozen=True)

    ids: tuple[str, ...] = ()
    """Every finding an update may cite: the summary's behaviour tags,
    :data:`FIDELITY_ALARM` when the alarm fired, the criteria due as uninformative."""
    injected: tuple[str, ...] = ()
    """Those that are text addressed to the grader or the pipeline."""
    snippets: tuple[str, ...] = ()
    """The injected texts (:attr:`Injection.snippet`)."""


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Injections:
    """The injections found in a scope's rollouts (by rollout id), and the rollouts each
    summary covers, so that a summary of summaries is counted over theirs."""

    by_rollout: dict[str, list[Injection]] = field(default_factory=dict)
    covers: list[tuple[BatchSummary, tuple[str, ...]]] = field(default_factory=list)

    def add(self, found: Mapping[str, Sequence[Injection]]) -> None:
        """Remember what the detector found in some rollouts (by id)."""
        self.by_rollout.update({rid: list(items) for rid, items in found.items() if items})

    def analysed(self, analyses: Sequence[IndividualAnalysis]) -> list[IndividualAnalysis]:
        """``analyses`` with amaris's finding in the analysis of each rollout that carried an
        injection (severity high), and an agent's own ``grader_injection`` renamed."""
        return [self._analysed(a) for a in analyses]

    def _analysed(self, analysis: IndividualAnalysis) -> IndividualAnalysis:
        found = self.by_rollout.get(analysis.rollout_id, [])
        hacking = analysis.reward_hacking_analysis
        if not found and all(b.tag != GRADER_INJECTION for b in hacking.behaviours):
            return analysis
        if not found:
            renamed = [
                b.model_copy(update={"tag": AGENTS_OWN_TAG}) if b.tag == GRADER_INJECTION else b
                for b in hacking.behaviours
            ]
            kept = hacking.model_copy(update={"behaviours": renamed})
            return analysis.model_copy(update={"reward_hacking_analysis": kept})
        fields = ", ".join(dict.fromkeys(i.field for i in found))
        ours = HackingBehaviour(
            tag=GRADER_INJECTION,
            description=_clip(f"{DESCRIPTION} in {fields}", LINE),
            evidence=_clip(f"{found[0].field}: {found[0].snippet}", LINE),
        )
        others = [b for b in hacking.behaviours if b.tag != GRADER_INJECTION]
        merged = RewardHackingAnalysis(
            behaviours=[ours, *others][:FEW], detected=True, severity="high"
        )
        return analysis.model_copy(update={"reward_hacking_analysis": merged})

    def summarised(self, summary: BatchSummary, rollout_ids: Iterable[str]) -> BatchSummary:
        """``summary`` of the analyses of ``rollout_ids``, its ``grader_injection`` behaviour
        the rollouts among them that carried an injection (none: no such behaviour)."""
        covered = tuple(dict.fromkeys(rollout_ids))
        fixed = self._counted(summary, covered)
        self.covers.append((fixed, covered))
        return fixed

    def merged(self, summary: BatchSummary, parts: Sequence[BatchSummary]) -> BatchSummary:
        """``summary`` of the summaries ``parts``, counted over the rollouts they cover (a
        part not seen here: every rollout summarised so far)."""
        covered: dict[str, None] = {}
        for part in parts:
            known = [ids for seen, ids in self.covers if seen is part]
            everything = (rid for _, ids in self.covers for rid in ids)
            covered.update(dict.fromkeys(known[0] if known else everything))
        return self.summarised(summary, covered)

    def _counted(self, summary: BatchSummary, covered: tuple[str, ...]) -> BatchSummary:
        hacking = summary.aggregated_reward_hacking
        others = [b for b in hacking.behaviours if b.tag != GRADER_INJECTION]
        carried = [rid for rid in covered if rid in self.by_rollout]
        behaviours = others
        if carried:
            ours = AggregatedBehaviour(
                tag=GRADER_INJECTION,
                description=DESCRIPTION,
                count=len(carried),
                share=len(carried) / len(covered),
                rollout_ids=carried[:MANY],
            )
            # Most frequent first, as the agents order them; the agents' least frequent
            # behaviour gives way when the list is full.
            behaviours = sorted([*others[: MANY - 1], ours], key=lambda b: -b.count)
        elif len(others) == len(hacking.behaviours):
            return summary
        detected = bool(behaviours) or (hacking.detected and not hacking.behaviours)
        update = AggregatedHackingAnalysis(behaviours=behaviours, detected=detected)
        return summary.model_copy(update={"aggregated_reward_hacking": update})

    def findings(
        self, summary: BatchSummary, alarm: bool, uninformative: Iterable[str]
    ) -> StepFindings:
        """The step's findings as the guard reads them: ``summary``'s tags, the fidelity
        ``alarm``'s id when it fired, the ``uninformative`` criteria's ids, and every
        injection found in the scope's rollouts."""
        tags = [b.tag for b in summary.aggregated_reward_hacking.behaviours]
        snippets = tuple(
            dict.fromkeys(i.snippet for items in self.by_rollout.values() for i in items)
        )[:MAX_SNIPPETS]
        injected = (GRADER_INJECTION,) if snippets or GRADER_INJECTION in tags else ()
        alarmed = [FIDELITY_ALARM] if alarm else []
        ids = tuple(dict.fromkeys([*tags, *injected, *alarmed, *uninformative]))
        return StepFindings(ids=ids, injected=injected, snippets=snippets)
