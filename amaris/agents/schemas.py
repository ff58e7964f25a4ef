"""Output models of the pipeline agents (analyzer, summarizers, query generator, updater).

Field names follow AMARIS. The models are lenient where an LLM is sloppy and strict where a
wrong value would mislead the pipeline: unknown fields are ignored, free-text fields and lists
may be omitted, enumerations are matched case-insensitively, but verdict fields (quality,
severity, detected, the update strategy) are required and checked.

Where a model holds a verdict and what justifies it, the justification's fields come first:
strict JSON schemas list properties in field order, so a constrained decoder has the LLM
write its evidence before the verdict it then follows from.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

_TAG_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class _Lenient(BaseModel):
    # LLMs add commentary fields; ignoring them beats failing a whole analysis.
    model_config = ConfigDict(extra="ignore")


def normalise_tag(value: str) -> str:
    """Returns a behaviour tag as lowercase snake_case ("Grader-Manipulation" -> "grader_...").

    Raises:
        ValueError: nothing usable is left, or it does not start with a letter.
    """
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", value.strip())
    tag = re.sub(r"[^a-z0-9]+", "_", spaced.lower()).strip("_")
    if not _TAG_RE.fullmatch(tag):
        raise ValueError(f"tag {value!r} is not a snake_case name")
    return tag


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


# Enumerations are matched case-insensitively: "Good" and "corrective" are clear enough.
Quality = Annotated[Literal["poor", "fair", "good", "excellent"], BeforeValidator(_lower)]
Severity = Annotated[Literal["none", "low", "medium", "high"], BeforeValidator(_lower)]
Strategy = Annotated[Literal["MAINTENANCE", "CORRECTIVE", "ADVANCEMENT"], BeforeValidator(_upper)]
Action = Annotated[Literal["add", "edit", "reweight", "retire"], BeforeValidator(_lower)]
Tag = Annotated[str, AfterValidator(normalise_tag)]


# --- analyzer ----------------------------------------------------------------------------------


class OverallAssessment(_Lenient):
    """The analyzer's verdict on the response as a whole."""

    summary: str = ""
    quality: Quality


class PerformanceAtStage(_Lenient):
    """How the response compares with what is expected at this point of training."""

    stage: str = ""
    assessment: str = ""
    meets_expectations: bool


class HackingBehaviour(_Lenient):
    """One reward-hacking behaviour found in a response."""

    tag: Tag
    description: str = ""
    evidence: str = ""


class RewardHackingAnalysis(_Lenient):
    """Whether a response gains reward without genuine quality, and how.

    ``detected`` and ``severity`` are made consistent with ``behaviours``: listed behaviours
    mean detected (and at least low severity); none listed means severity none, and claiming
    detection without listing any is an error.
    """

    behaviours: list[HackingBehaviour] = Field(default_factory=list)
    detected: bool
    severity: Severity

    @model_validator(mode="after")
    def _detected_matches_behaviours(self) -> RewardHackingAnalysis:
        if self.behaviours:
            self.detected = True
            if self.severity == "none":
                self.severity = "low"
        elif self.detected:
            raise ValueError("reward_hacking_analysis.behaviours is empty although detected")
        else:
            self.severity = "none"
        return self


class PerformanceAdvancementStrategy(_Lenient):
    """What the policy should do next to improve for real."""

    next_steps: list[str] = Field(default_factory=list)


class RubricEvaluation(_Lenient):
    """Whether the rubric scored this response fairly, and what it misses."""

    gaps: list[str] = Field(default_factory=list)
    notes: str = ""
    score_justified: bool
    over_rewarded: bool = False
    under_rewarded: bool = False


class OtherObservation(_Lenient):
    """A free-form observation."""

    observation: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        # LLMs often write a plain list of strings here.
        return {"observation": value} if isinstance(value, str) else value


class IndividualAnalysis(_Lenient):
    """The analyzer's output: a deep analysis of one rollout."""

    rollout_id: str
    overall_assessment: OverallAssessment
    performance_at_stage: PerformanceAtStage
    reward_hacking_analysis: RewardHackingAnalysis
    performance_advancement_strategy: PerformanceAdvancementStrategy = Field(
        default_factory=PerformanceAdvancementStrategy
    )
    rubric_evaluation: RubricEvaluation
    other_observations: list[OtherObservation] = Field(default_factory=list)


# --- summarizer and meta-summarizer ------------------------------------------------------------


class ExecutiveSummary(_Lenient):
    """The step in a few sentences, and where rewards are heading."""

    summary: str = ""
    trend: str = ""


class SystemicPattern(_Lenient):
    """A pattern seen across several rollouts."""

    pattern: str
    frequency: int = Field(default=0, ge=0)
    rollout_ids: list[str] = Field(default_factory=list)


class AggregatedBehaviour(_Lenient):
    """One hacking behaviour across the batch: how many rollouts show it, and which."""

    tag: Tag
    description: str = ""
    count: int = Field(ge=0)
    share: float = Field(ge=0.0, le=1.0)
    rollout_ids: list[str] = Field(default_factory=list)


class AggregatedHackingAnalysis(_Lenient):
    """Reward hacking across the batch. ``detected`` is set when behaviours are listed."""

    behaviours: list[AggregatedBehaviour] = Field(default_factory=list)
    detected: bool

    @model_validator(mode="after")
    def _detected_if_listed(self) -> AggregatedHackingAnalysis:
        if self.behaviours:
            self.detected = True
        return self


class RubricMetaEvaluation(_Lenient):
    """What the rubric as a whole gets wrong in this batch."""

    gaps: list[str] = Field(default_factory=list)
    notes: str = ""


class PerformanceAdvancementAnalysis(_Lenient):
    """Where the policy stands and how it could genuinely improve."""

    summary: str = ""


class RubricEvolutionPlan(_Lenient):
    """What the updater should consider changing."""

    recommendations: list[str] = Field(default_factory=list)


class MemoryEntry(_Lenient):
    """The text stored in semantic memory for this step, and its search keywords."""

    text: str = Field(min_length=1)
    keywords: list[str] = Field(default_factory=list)


class BatchSummary(_Lenient):
    """The summarizer's (and meta-summarizer's) output: one step's rollouts in aggregate."""

    executive_summary: ExecutiveSummary
    systemic_patterns: list[SystemicPattern] = Field(default_factory=list)
    aggregated_reward_hacking: AggregatedHackingAnalysis
    rubric_meta_evaluation: RubricMetaEvaluation = Field(default_factory=RubricMetaEvaluation)
    performance_advancement_analysis: PerformanceAdvancementAnalysis = Field(
        default_factory=PerformanceAdvancementAnalysis
    )
    rubric_evolution_plan: RubricEvolutionPlan = Field(default_factory=RubricEvolutionPlan)
    memory_entry: MemoryEntry


# --- query generator ---------------------------------------------------------------------------


class MemoryQuery(_Lenient):
    """One semantic-memory search query and why it is asked."""

    query: str = Field(min_length=1)
    purpose: str = ""


class QueryPlan(_Lenient):
    """The query generator's output."""

    queries: list[MemoryQuery] = Field(min_length=1, max_length=20)


# --- updater -----------------------------------------------------------------------------------


class ConsultedMemory(_Lenient):
    """A memory item the updater used."""

    type: str = ""
    step: int | None = None
    relevance: str = ""


class MemoryConsultation(_Lenient):
    """Which memory the updater consulted and what it learnt from it."""

    consulted: list[ConsultedMemory] = Field(default_factory=list)
    insights: str = ""


class UpdateRationale(_Lenient):
    """Why the update is proposed, with the evidence."""

    summary: str = ""
    evidence: list[str] = Field(default_factory=list)


class RubricModification(_Lenient):
    """One change to the adaptive rubric; which fields are needed depends on ``action``."""

    action: Action
    criterion_id: str | None = None
    text: str | None = None
    weight: float | None = Field(default=None, allow_inf_nan=False)
    reason: str = ""

    @field_validator("criterion_id", "text")
    @classmethod
    def _blank_is_missing(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return value.strip() or None

    @model_validator(mode="after")
    def _fields_for_action(self) -> RubricModification:
        needs: dict[str, tuple[str, ...]] = {
            "add": ("text", "weight"),
            "edit": ("criterion_id", "text"),
            "reweight": ("criterion_id", "weight"),
            "retire": ("criterion_id",),
        }
        missing = [name for name in needs[self.action] if getattr(self, name) is None]
        if missing:
            raise ValueError(f"{self.action} needs {' and '.join(missing)}")
        return self


class MemoryArtifact(_Lenient):
    """What the updater wants remembered about this update."""

    text: str = ""


class RubricUpdateProposal(_Lenient):
    """The updater's output. amaris applies and validates the modifications itself."""

    memory_consultation: MemoryConsultation = Field(default_factory=MemoryConsultation)
    rationale: UpdateRationale = Field(default_factory=UpdateRationale)
    update_strategy: Strategy
    rubric_modifications: list[RubricModification] = Field(default_factory=list)
    memory_artifact: MemoryArtifact = Field(default_factory=MemoryArtifact)


# -- rubric bootstrap (amaris bootstrap) -----------------------------------------------------
class CandidateCriterion(_Lenient):
    """One criterion the judge proposes from ranked examples; the evidence comes first."""

    evidence: str = ""
    text: str = Field(min_length=1, max_length=500)
    kind: Annotated[Literal["requirement", "pitfall"], BeforeValidator(_lower)]


class BootstrapCandidates(_Lenient):
    """The judge's candidate criteria for an initial rubric (``amaris bootstrap``)."""

    criteria: list[CandidateCriterion] = Field(default_factory=list)
