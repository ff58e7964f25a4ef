"""Pydantic models at the HTTP boundary: the AMARIS request body and amaris's responses."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Rollout(BaseModel):
    """One policy sample to score (AMARIS ``rollout``)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=512, description="Unique rollout id.")
    input: str = Field(description="The prompt the policy answered.")
    output: str = Field(description="The policy's response.")
    supplemental_context: str | None = Field(
        default=None, description="Ground truth, reference solution or grading notes."
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="Free-form metadata, stored with the rollout."
    )
    group_id: str | None = Field(
        default=None, min_length=1, max_length=512,
        description="Key of the rollout's group (the prompt id): the analyzer compares the "
        "responses of one group. Default: rollouts with the same input form a group.",
    )


class TrainingMetadata(BaseModel):
    """Where the trainer is (AMARIS ``metadata``)."""

    model_config = ConfigDict(extra="allow")

    high_level_goal: str | None = Field(default=None, description="Training objective.")
    model_size: str | None = Field(default=None, description="Policy size, e.g. 7B.")
    current_step: int = Field(default=0, ge=0, description="Training step of this rollout.")
    total_steps: int | None = Field(default=None, ge=0, description="Planned training steps.")
    other_context: str | None = Field(
        default=None, description="Anything else about the run; stored with the rollout."
    )


class ScoreRequest(BaseModel):
    """Body of ``POST /score``: the AMARIS request, plus an optional breakdown flag."""

    model_config = ConfigDict(extra="forbid")

    rollout: Rollout
    metadata: TrainingMetadata = Field(default_factory=TrainingMetadata)
    include_breakdown: bool = Field(
        default=False, description="Add the per-criterion verdicts to the response."
    )


class CriterionResult(BaseModel):
    """The judge's verdict on one criterion and its share of the reward."""

    id: str
    text: str
    weight: float
    is_anchor: bool
    verdict: int = Field(description="Judge verdict on the declared scale (0-4).")
    reason: str


ScoreStatus = Literal["scored", "unscored", "invalid"]


class ScoreResponse(BaseModel):
    """Answer of ``POST /score`` (and one item of ``/batch_score``)."""

    score: float | None = Field(
        description="Reward in [0, 1]; null when unscored (see scoring.on_failure)."
    )
    rubric_version: int | None = Field(description="Rubric version that produced the score.")
    status: ScoreStatus
    rollout_id: str | None = None
    reason: str | None = Field(default=None, description="Why the rollout is unscored/invalid.")
    cached: bool = Field(default=False, description="Answered from the score cache.")
    truncated: list[str] = Field(
        default_factory=list, description="Fields cut to scoring.max_field_chars before judging."
    )
    breakdown: list[CriterionResult] | None = None


class BatchScoreRequest(BaseModel):
    """Body of ``POST /batch_score``. Items are validated one by one."""

    model_config = ConfigDict(extra="forbid")

    items: list[Any] = Field(
        description="Each item is a /score body: {rollout, metadata}.", min_length=1
    )
    include_breakdown: bool = False


class BatchScoreResponse(BaseModel):
    """Answer of ``POST /batch_score``: one result per item, in order."""

    results: list[ScoreResponse]


class CriterionPublic(BaseModel):
    """A criterion as shown by ``GET /rubrics``."""

    id: str
    text: str
    weight: float
    is_anchor: bool


class RubricPublic(BaseModel):
    """The rubric version in force."""

    version: int
    parent: int | None
    created_at: str
    step: int | None
    origin: Literal["config", "updater", "rollback"]
    anchors: list[CriterionPublic]
    adaptive: list[CriterionPublic]


class StructuredOutputStatus(BaseModel):
    """How one agent's replies are constrained now."""

    mode: Literal["json_schema", "json_object", "none", "configured"] = Field(
        description="json_schema, json_object, none (the prompt alone) or configured "
        "(agents.<agent>.response_format sent as is)."
    )
    reason: str = Field(description="Why: the default, the configuration, or the refusal "
                        "that made amaris fall back.")


class HealthResponse(BaseModel):
    """Answer of ``GET /healthz``."""

    status: Literal["ok"]
    version: str
    judge_backend: str = Field(description="'offline (rule-based, NOT an LLM)' or the endpoint.")
    offline_judge: bool
    judge_model: str
    rubric_version: int
    counters: dict[str, int] = Field(
        default_factory=dict, description="Scored, cached and unscored rewards since start."
    )
    structured_output: dict[str, StructuredOutputStatus] = Field(
        default_factory=dict, description="Per agent: the structured-output mode in use and why."
    )


class ErrorDetail(BaseModel):
    """One problem with a request, naming its field."""

    field: str
    message: str


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body."""

    error: str
    detail: list[ErrorDetail] = Field(default_factory=list)
