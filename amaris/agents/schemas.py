"""Output models of the pipeline agents (analyzer, summarizers, query generator, updater).

Field names follow AMARIS. The models are lenient where an LLM is sloppy and strict where a
wrong value would mislead the pipeline: unknown fields are ignored, free-text fields and lists
may be omitted, enumerations are matched case-insensitively, but verdict fields (quality,
severity, detected, the update strategy) are required and checked.

Where a model holds a verdict and what justifies it, the justification's fields come first:
strict JSON schemas list properties in field order, so a constrained decoder has the LLM
write its evidence before the verdict it then follows from.

Every free-text string and every list is bounded (:class:`AtMost`): the bound is in the
strict JSON schema (``maxLength``, ``maxItems``), so a constrained decoder cannot write
more, and a longer value from a model that is not constrained (``json_object`` or prompt
only) is clipped to it rather than failing the reply. The bounds leave a real model room
for what the prompts ask (sentences, a paragraph, a handful of items) and bound the tokens
of a model that runs away inside a string or a list (``docs/pipeline.md``). A request
whose agent sets ``max_tokens`` carries them lower still, fitted to the cap
(:mod:`amaris.llm.output_fit`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import annotated_types
import re2
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from amaris.jsonfile import JSONDict
from amaris.step_answer import StrategyName

_TAG_RE = re2.compile(r"^[a-z][a-z0-9_]*$")
# On an agent's (an LLM's) text: RE2, linear whatever it wrote (amaris.text's rule).
_CAMEL = re2.compile(r"([a-z0-9])([A-Z])")
_NOT_TAG = re2.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class AtMost(annotated_types.GroupedMetadata):
    """At most ``limit`` characters (a string) or items (a list): advertised as
    ``maxLength`` / ``maxItems`` in the JSON schema, and a longer value is clipped to its
    first ``limit`` on validation instead of being refused."""

    limit: int

    def __iter__(self) -> Iterator[object]:
        yield annotated_types.MaxLen(self.limit)
        # After the constraint: pydantic wraps it, so the clip runs before the check.
        yield BeforeValidator(self.clip)

    def clip(self, value: Any) -> Any:
        """``value`` cut to its first ``limit`` characters or items (other types as is)."""
        if isinstance(value, str | list) and len(value) > self.limit:
            return value[: self.limit]
        return value


LABEL = 64
"""A tag, a keyword, a trend, a stage, a criterion id, a memory type."""
ID = 512
"""A rollout id (the API's own bound on it)."""
LINE = 500
"""A sentence or two: a list item, a description, a quote, a reason, a query."""
PARAGRAPH = 1000
"""A few sentences: an assessment, a summary, notes, insights."""
MEMORY_TEXT = 2000
"""A memory text (what semantic memory keeps of a summary: its first 2,000 characters)."""
FEW = 5
"""Items of a rollout's lists (behaviours, next steps, gaps, observations)."""
MANY = 10
"""Items of a step's lists (patterns, behaviours, gaps, recommendations, keywords, rollout
ids, consulted memory, evidence)."""
MAX_QUERIES = 20
"""Queries of a query plan."""
MAX_MODIFICATIONS = 50
"""Modifications of an update proposal: the largest ``pipeline.max_modifications`` allows
(each request's schema holds them to the configured bound). Not clipped: the guardrails
refuse a proposal over the configured bound whole, and a clipped one could pass them."""

Label = Annotated[str, AtMost(LABEL)]
Line = Annotated[str, AtMost(LINE)]
Paragraph = Annotated[str, AtMost(PARAGRAPH)]
RolloutId = Annotated[str, AtMost(ID)]


class _Lenient(BaseModel):
    # LLMs add commentary fields; ignoring them beats failing a whole analysis.
    model_config = ConfigDict(extra="ignore")


def normalise_tag(value: str) -> str:
    """Returns a behaviour tag as lowercase snake_case ("Grader-Manipulation" -> "grader_...").

    Raises:
        ValueError: nothing usable is left, or it does not start with a letter.
    """
    spaced: str = _CAMEL.sub(r"\1_\2", value.strip())
    tag: str = _NOT_TAG.sub("_", spaced.lower()).strip("_")
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
Strategy = Annotated[StrategyName, BeforeValidator(_upper)]
Action = Annotated[Literal["add", "edit", "reweight", "retire"], BeforeValidator(_lower)]
Tag = Annotated[str, AtMost(LABEL), AfterValidator(normalise_tag)]


# --- analyzer ----------------------------------------------------------------------------------


class OverallAssessment(_Lenient):
    """The analyzer's verdict on the response as a whole."""

    summary: Paragraph = ""
    quality: Quality


class PerformanceAtStage(_Lenient):
    """How the response compares with what is expected at this point of training."""

    stage: Label = ""
    assessment: Paragraph = ""
    meets_expectations: bool


class HackingBehaviour(_Lenient):
    """One reward-hacking behaviour found in a response."""

    tag: Tag
    description: Line = ""
    evidence: Line = ""


def _consistent_detection(schema: JSONDict) -> None:  # a JSON schema: any shape
    """The JSON schema of :class:`RewardHackingAnalysis` as its two consistent shapes: one
    or more behaviours, detected, some severity; or none, not detected, severity none. A
    constrained decoder then cannot write a detection without a behaviour (a small model
    does, and validation refuses it: a re-ask, or the analysis lost)."""
    properties = schema.pop("properties")
    required = schema.pop("required", [])
    del schema["type"]
    listed = {
        **properties,
        "behaviours": {**properties["behaviours"], "minItems": 1},
        "detected": {"type": "boolean", "enum": [True]},
        "severity": {**properties["severity"], "enum": ["low", "medium", "high"]},
    }
    none = {
        **properties,
        "behaviours": {**properties["behaviours"], "maxItems": 0},
        "detected": {"type": "boolean", "enum": [False]},
        "severity": {**properties["severity"], "enum": ["none"]},
    }
    schema["anyOf"] = [
        {"type": "object", "properties": shape, "required": required} for shape in (listed, none)
    ]


class RewardHackingAnalysis(_Lenient):
    """Whether a response gains reward without genuine quality, and how.

    ``detected`` and ``severity`` are made consistent with ``behaviours``: listed behaviours
    mean detected (and at least low severity); none listed means severity none, and claiming
    detection without listing any is an error. The JSON schema offers only the consistent
    shapes (:func:`_consistent_detection`).
    """

    model_config = ConfigDict(extra="ignore", json_schema_extra=_consistent_detection)

    behaviours: Annotated[list[HackingBehaviour], AtMost(FEW)] = Field(default_factory=list)
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

    next_steps: Annotated[list[Line], AtMost(FEW)] = Field(default_factory=list)


class RubricEvaluation(_Lenient):
    """Whether the rubric scored this response fairly, and what it misses."""

    gaps: Annotated[list[Line], AtMost(FEW)] = Field(default_factory=list)
    notes: Paragraph = ""
    score_justified: bool
    over_rewarded: bool = False
    under_rewarded: bool = False


class OtherObservation(_Lenient):
    """A free-form observation."""

    observation: Line = ""

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        # LLMs often write a plain list of strings here.
        return {"observation": value} if isinstance(value, str) else value


class IndividualAnalysis(_Lenient):
    """The analyzer's output: a deep analysis of one rollout."""

    rollout_id: RolloutId
    overall_assessment: OverallAssessment
    performance_at_stage: PerformanceAtStage
    reward_hacking_analysis: RewardHackingAnalysis
    performance_advancement_strategy: PerformanceAdvancementStrategy = Field(
        default_factory=PerformanceAdvancementStrategy
    )
    rubric_evaluation: RubricEvaluation
    other_observations: Annotated[list[OtherObservation], AtMost(FEW)] = Field(default_factory=list)


# --- summarizer and meta-summarizer ------------------------------------------------------------


class ExecutiveSummary(_Lenient):
    """The step in a few sentences, and where rewards are heading."""

    summary: Paragraph = ""
    trend: Label = ""


class SystemicPattern(_Lenient):
    """A pattern seen across several rollouts."""

    pattern: Line
    frequency: int = Field(default=0, ge=0)
    rollout_ids: Annotated[list[RolloutId], AtMost(MANY)] = Field(default_factory=list)


class AggregatedBehaviour(_Lenient):
    """One hacking behaviour across the batch: how many rollouts show it, and which."""

    tag: Tag
    description: Line = ""
    count: int = Field(ge=0)
    share: float = Field(ge=0.0, le=1.0)
    rollout_ids: Annotated[list[RolloutId], AtMost(MANY)] = Field(default_factory=list)


class AggregatedHackingAnalysis(_Lenient):
    """Reward hacking across the batch. ``detected`` is set when behaviours are listed."""

    behaviours: Annotated[list[AggregatedBehaviour], AtMost(MANY)] = Field(default_factory=list)
    detected: bool

    @model_validator(mode="after")
    def _detected_if_listed(self) -> AggregatedHackingAnalysis:
        if self.behaviours:
            self.detected = True
        return self


class RubricMetaEvaluation(_Lenient):
    """What the rubric as a whole gets wrong in this batch."""

    gaps: Annotated[list[Line], AtMost(MANY)] = Field(default_factory=list)
    notes: Paragraph = ""


class PerformanceAdvancementAnalysis(_Lenient):
    """Where the policy stands and how it could genuinely improve."""

    summary: Paragraph = ""


class RubricEvolutionPlan(_Lenient):
    """What the updater should consider changing."""

    recommendations: Annotated[list[Line], AtMost(MANY)] = Field(default_factory=list)


class MemoryEntry(_Lenient):
    """The text stored in semantic memory for this step, and its search keywords."""

    text: Annotated[str, AtMost(MEMORY_TEXT)] = Field(min_length=1)
    keywords: Annotated[list[Label], AtMost(MANY)] = Field(default_factory=list)


class BatchSummary(_Lenient):
    """The summarizer's (and meta-summarizer's) output: one step's rollouts in aggregate."""

    executive_summary: ExecutiveSummary
    systemic_patterns: Annotated[list[SystemicPattern], AtMost(MANY)] = Field(default_factory=list)
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

    query: Line = Field(min_length=1)
    purpose: Line = ""


class QueryPlan(_Lenient):
    """The query generator's output."""

    queries: Annotated[list[MemoryQuery], AtMost(MAX_QUERIES)] = Field(min_length=1)


# --- updater -----------------------------------------------------------------------------------


class ConsultedMemory(_Lenient):
    """A memory item the updater used."""

    type: Label = ""
    step: int | None = None
    relevance: Line = ""


class MemoryConsultation(_Lenient):
    """Which memory the updater consulted and what it learnt from it."""

    consulted: Annotated[list[ConsultedMemory], AtMost(MANY)] = Field(default_factory=list)
    insights: Paragraph = ""


class UpdateRationale(_Lenient):
    """Why the update is proposed, with the evidence."""

    summary: Paragraph = ""
    evidence: Annotated[list[Line], AtMost(MANY)] = Field(default_factory=list)


class RubricModification(_Lenient):
    """One change to the adaptive rubric; which fields are needed depends on ``action``."""

    action: Action
    # Bounded, never clipped: a cut id or criterion text would change what is applied.
    criterion_id: Annotated[str, annotated_types.MaxLen(LABEL)] | None = None
    findings: Annotated[
        list[Annotated[str, annotated_types.MaxLen(LABEL)]], annotated_types.MaxLen(MANY)
    ] = Field(default_factory=list)
    """The step findings an add or an edit rests on: behaviour tags of the summary,
    ``fidelity_alarm``, ids of uninformative criteria (:mod:`amaris.rubric.support`)."""
    text: Annotated[str, annotated_types.MaxLen(PARAGRAPH)] | None = None
    weight: float | None = Field(default=None, allow_inf_nan=False)
    reason: Line = ""

    @field_validator("criterion_id", "text")
    @classmethod
    def _blank_is_missing(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return value.strip() or None

    @field_validator("findings")
    @classmethod
    def _distinct_findings(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(f.strip() for f in value if f.strip()))

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

    text: Annotated[str, AtMost(MEMORY_TEXT)] = ""


class RubricUpdateProposal(_Lenient):
    """The updater's output. amaris applies and validates the modifications itself."""

    memory_consultation: MemoryConsultation = Field(default_factory=MemoryConsultation)
    rationale: UpdateRationale = Field(default_factory=UpdateRationale)
    update_strategy: Strategy
    rubric_modifications: list[RubricModification] = Field(
        default_factory=list, max_length=MAX_MODIFICATIONS
    )
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
