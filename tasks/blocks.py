"""The blocks the pipeline's LLM tasks write for their agents (:func:`ask`'s ``context``
and ``data``), as they write them: amaris's models where a block carries one, written as
the model's JSON (``model_dump(mode="json")``) with the block
(:func:`amaris.agents.prompts.data_message`). The analyzer's are
:mod:`amaris.agents.payloads`' own (:class:`~amaris.agents.payloads.AnalyzerContext`,
:class:`~amaris.agents.payloads.AnalyzerInput`). What the offline agents read back is the
JSON of these, typed in :mod:`amaris.agents.payloads`."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from pydantic import ConfigDict, RootModel

from amaris.agents.payloads import AnalyzerContext, AnalyzerInput, BoundsData, ScoreStats
from amaris.agents.schemas import BatchSummary
from amaris.audit.models import AlarmEvidence
from amaris.jsonfile import JSONDict
from amaris.rubric.informativeness import DueCriterion, UpdaterCriterion
from amaris.tasks.models import AgentCriterion, DynamicMemory, ScoredAnalysis, StaticMemory


# The trainer's metadata of a scope's latest rollout (RolloutRecord.metadata): JSON of the
# trainer's making, open in the API too (amaris.models.TrainingMetadata's extra fields).
class TrainerMetadata(RootModel[JSONDict]):
    """The trainer's metadata of a scope's latest rollout, as the rollout log keeps it
    (:attr:`amaris.memory.records.RolloutRecord.metadata`): what every data block of the
    scope's step carries, written as that JSON (and hashed so in a task's cache key)."""

    model_config = ConfigDict(frozen=True)


class CriteriaContext(TypedDict):
    """The context of the summarizers and the query generator: the rubric in force."""

    criteria: list[AgentCriterion]


class UpdaterContext(TypedDict):
    """The updater's context: the rubric in force and the bounds of an update."""

    criteria: list[AgentCriterion]
    bounds: BoundsData


class StepInput(TypedDict):
    """What every data block of a scope's step starts with."""

    step: int
    metadata: TrainerMetadata


class SummaryInput(StepInput, total=False):
    """The summarizer's data (its ``analyses``, with their scores' statistics) and the
    meta-summarizer's (its ``summaries``); without its list when a task measures the
    block around it (:func:`amaris.tasks._common.split_for`)."""

    score_stats: ScoreStats
    analyses: list[ScoredAnalysis]
    summaries: list[BatchSummary]


class QueryInput(StepInput):
    """The query generator's data."""

    max_queries: int
    summary: BatchSummary


class UpdaterInput(StepInput):
    """The updater's data."""

    summary: BatchSummary
    static_memory: list[StaticMemory]
    dynamic_memory: list[DynamicMemory]
    criterion_stats: list[UpdaterCriterion]
    uninformative: list[DueCriterion]
    fidelity_alarm: NotRequired[AlarmEvidence]


TaskContext = AnalyzerContext | CriteriaContext | UpdaterContext
"""A context block a pipeline task writes."""
TaskData = AnalyzerInput | SummaryInput | QueryInput | UpdaterInput
"""A data block a pipeline task writes."""
