"""The blocks the pipeline's LLM tasks write for their agents (``tasks._common.ask``'s
``context`` and ``data``), and amaris's models they carry, each written as its JSON
(``model_dump(mode="json")``) with the block (:func:`amaris.agents.prompts.data_message`).
The analyzer's are :mod:`amaris.agents.payloads`' own (:class:`AnalyzerContext`,
:class:`AnalyzerInput`). What the offline agents read back is the JSON of these, typed in
:mod:`amaris.agents.payloads`.

The models live here, below the pipeline's tasks, the rubric's informativeness and the
audit that make them, so that the prompts take every block typed
(:data:`amaris.agents.prompts.DataBlock`); those modules import them from here.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, Field, RootModel

from amaris.agents.payloads import (
    AnalyzerContext,
    AnalyzerInput,
    BoundsData,
    CriteriaContext,
    CriterionData,
    ScoreStats,
)
from amaris.agents.schemas import BatchSummary, IndividualAnalysis
from amaris.jsonfile import JSONDict


# The trainer's metadata of a scope's latest rollout (RolloutRecord.metadata): JSON of the
# trainer's making, open in the API too (amaris.models.TrainingMetadata's extra fields).
class TrainerMetadata(RootModel[JSONDict]):
    """The trainer's metadata of a scope's latest rollout, as the rollout log keeps it
    (:attr:`amaris.memory.records.RolloutRecord.metadata`): what every data block of the
    scope's step carries, written as that JSON (and hashed so in a task's cache key)."""

    model_config = ConfigDict(frozen=True)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScoredAnalysis(IndividualAnalysis):
    """A rollout's analysis with the reward the rollout got, as the summarizer reads it."""

    score: float | None

    @classmethod
    def of(cls, analysis: IndividualAnalysis, score: float | None) -> ScoredAnalysis:
        return cls(**dict(analysis), score=score)


class StaticMemory(_Frozen):
    """A summary of a recent step (static memory)."""

    step: int
    type: str
    text: str


class DynamicMemory(_Frozen):
    """A past document matched by a query (dynamic memory)."""

    type: str
    step: int
    text: str
    score: float
    """Its cosine similarity to the query, to 4 decimals."""
    query: str


class UpdaterCriterion(BaseModel):
    """A criterion's figures of this step as the updater reads them (to three decimals)."""

    model_config = ConfigDict(frozen=True)

    id: str
    verdicts: int
    mean: float
    variance: float
    extreme_share: float
    zero_spread_group_share: float | None
    reward_correlation: float | None
    saturated: bool
    zero_spread: bool
    uninformative_steps: int
    """Its streak of uninformative steps so far."""


class DueCriterion(BaseModel):
    """An adaptive criterion uninformative for enough consecutive steps to act on."""

    model_config = ConfigDict(frozen=True)

    criterion_id: str
    text: str
    steps: int = Field(description="Consecutive steps, ending with this one.")
    evidence: str


class DisagreeingRollout(BaseModel):
    """A rollout the two judges rewarded most differently (alarm evidence)."""

    model_config = ConfigDict(frozen=True)

    rollout_id: str
    input: str
    output: str
    output_words: int | None = None
    """Words of the whole reply (``output`` is clipped): padding shows in it."""
    training_reward: float
    audit_reward: float


class CriterionDisagreement(BaseModel):
    """How differently the two judges read one criterion over the sample."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    disagreement: float = Field(ge=0, le=1)
    """Mean ``|training verdict - audit verdict|``, as a share of the scale."""
    rollouts: int = Field(ge=0)


class AlarmEvidence(BaseModel):
    """What the analyzer and updater of a scope are shown when the alarm fires: why, the
    rollouts the judges rewarded most differently, and the criteria they read differently."""

    model_config = ConfigDict(frozen=True)

    step: int
    reason: str
    rollouts: list[DisagreeingRollout] = Field(default_factory=list)
    criteria: list[CriterionDisagreement] = Field(default_factory=list)


class UpdaterContext(TypedDict):
    """The updater's context: the rubric in force and the bounds of an update."""

    criteria: list[CriterionData]
    bounds: BoundsData


class StepInput(TypedDict):
    """What every data block of a scope's step starts with."""

    step: int
    metadata: TrainerMetadata


class SummaryInput(StepInput, total=False):
    """The summarizer's data (its ``analyses``, with their scores' statistics) and the
    meta-summarizer's (its ``summaries``); without its list when a task measures the
    block around it (:func:`tasks._common.split_for`)."""

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
