"""Pydantic models at the HTTP boundary: the AMARIS request body and amaris's responses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, Required, TypedDict

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from amaris.jsonfile import JSONDict
from amaris.text_fields import JSONObject as JSONObject
from amaris.text_fields import JSONValue as JSONValue
from amaris.text_fields import Text as Text
from amaris.text_fields import json_chars
from amaris.trajectory import (
    MAX_MESSAGES,
    FinishReason,
    IncludeTurns,
    Message,
    TurnRewards,
    check_form,
    check_messages,
    final_answer,
    prompt_text,
    trajectory_text,
    wire_form,
)

MAX_EXTRA_NAME = 200
"""Longest name of an extra field of the training metadata."""


class Rollout(BaseModel):
    """One policy sample to score (AMARIS ``rollout``)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [{"required": ["input", "output"]}, {"required": ["messages"]}]
        },
    )

    id: Text = Field(min_length=1, max_length=512, description="Unique rollout id within its step.")
    input: Text = Field(
        default="",
        description="The prompt the policy answered. Required unless `messages` is sent; "
        "with `messages`, derived from them (the messages before the first assistant one).",
    )
    output: Text = Field(
        default="",
        description="The policy's response. Required unless `messages` is sent; with "
        "`messages`, derived from them (every message from the first assistant one on, "
        "numbered, then the outcome and the finish reason).",
    )
    messages: list[Message] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MESSAGES,
        description="The rollout as an agent's trajectory: an OpenAI chat conversation "
        "(system, user, assistant with optional tool_calls, tool). Sent instead of "
        "`input` and `output`.",
    )
    outcome: JSONObject | None = Field(
        default=None,
        description="The environment's verifiable signals (e.g. tests_passed, env_reward), "
        "shown to the judge as evidence. Only with `messages`.",
    )
    finish_reason: FinishReason | None = Field(
        default=None, description="Why the episode ended. Only with `messages`."
    )
    supplemental_context: Text | None = Field(
        default=None, description="Ground truth, reference solution or grading notes."
    )
    metadata: JSONObject | None = Field(
        default=None, description="Free-form metadata, stored with the rollout."
    )
    group_id: Text | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Key of the rollout's group (the prompt id): the analyzer compares the "
        "responses of one group. Default: rollouts with the same input form a group.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_form(cls, data: Any) -> Any:
        if isinstance(data, dict):
            check_form(data)
        return data

    @model_validator(mode="after")
    def _derive_texts(self) -> Rollout:
        if self.messages is not None:
            check_messages(self.messages)
            self.input = prompt_text(self.messages)
            self.output = trajectory_text(self.messages, self.outcome, self.finish_reason)
        return self

    @model_serializer(mode="wrap")
    def _wire_form(self, handler: SerializerFunctionWrapHandler) -> JSONDict:
        # The form a request sends: keys dropped from the model's own dump.
        return wire_form(handler(self), self.messages is not None)

    def answer(self) -> str:
        """What rule criteria check: the output, or a trajectory's final answer (its last
        assistant message)."""
        return self.output if self.messages is None else final_answer(self.messages)


class TrainingMetadata(BaseModel):
    """Where the trainer is (AMARIS ``metadata``)."""

    model_config = ConfigDict(extra="allow")
    # Keys a trainer adds beyond AMARIS's fields: their shape is the trainer's, open.
    __pydantic_extra__: dict[str, JSONValue] = Field(init=False)

    high_level_goal: Text | None = Field(default=None, description="Training objective.")
    model_size: Text | None = Field(default=None, description="Policy size, e.g. 7B.")
    current_step: int = Field(
        default=0,
        ge=0,
        description="Training step of this rollout. Left out: the step open now (the "
        "oldest open step, else the one after the newest step amaris knows).",
    )
    total_steps: int | None = Field(default=None, ge=0, description="Planned training steps.")
    other_context: Text | None = Field(
        default=None, description="Anything else about the run; stored with the rollout."
    )

    @model_validator(mode="after")
    def _extra_names(self) -> TrainingMetadata:
        for name in self.model_extra or {}:
            if len(name) > MAX_EXTRA_NAME:
                raise PydanticCustomError(
                    "extra_name",
                    "an extra field's name has {size} characters; the limit is {limit}",
                    {"size": len(name), "limit": MAX_EXTRA_NAME},
                )
        return self


class ScoreRequest(BaseModel):
    """Body of ``POST /score``: the AMARIS request, plus an optional breakdown flag."""

    model_config = ConfigDict(extra="forbid")

    rollout: Rollout
    metadata: TrainingMetadata = Field(default_factory=TrainingMetadata)
    include_breakdown: bool = Field(
        default=False, description="Add the per-criterion verdicts to the response."
    )
    include_turns: IncludeTurns = False

    def text_sizes(self) -> Iterator[tuple[str, int]]:
        """Every free-text field that is set, with its size in characters (a JSON value:
        :func:`json_chars`), named as in the request (``rollout.output``,
        ``metadata.<extra field>``)."""
        rollout = self.rollout
        texts: tuple[str, ...] = ("id", "supplemental_context", "group_id")
        if rollout.messages is None:
            texts += ("input", "output")
        for name in texts:
            value = getattr(rollout, name)
            if value is not None:
                yield f"rollout.{name}", len(value)
        for name in ("metadata", "outcome"):
            if getattr(rollout, name) is not None:
                yield f"rollout.{name}", json_chars(getattr(rollout, name))
        if rollout.messages is not None:
            yield "rollout.messages", len(rollout.input) + len(rollout.output)
        meta = self.metadata
        for name in ("high_level_goal", "model_size", "other_context"):
            value = getattr(meta, name)
            if value is not None:
                yield f"metadata.{name}", len(value)
        extras = meta.model_extra or {}
        for key, extra in extras.items():
            yield f"metadata.{key}", len(extra) if isinstance(extra, str) else json_chars(extra)
        if len(extras) > 1:
            # Many small extra fields: the analyzer reads them all with every rollout.
            yield "metadata", json_chars(extras)


class GetRewardBody(TypedDict, total=False):
    """A ``/get_reward`` body as a trainer sends it (the server's ``GetRewardRequest``)."""

    query: Required[list[str]]
    prompts: Required[list[str]]
    labels: list[Any] | None  # the trainer's reference answers: any JSON
    group_ids: list[str] | None
    amaris_metadata: dict[str, str | int] | None  # high_level_goal, model_size, total_steps...


class CriterionResult(BaseModel):
    """The judge's verdict on one criterion and its share of the reward."""

    id: str
    text: str
    weight: float
    is_anchor: bool
    verdict: int | float = Field(
        description="Judge verdict on the declared scale (0-4): an integer, or a fraction with "
        "agents.scorer.samples > 1 (the mean of the samples) or agents.scorer.logprobs (the "
        "expected score)."
    )
    kind: Literal["judge", "rule"] = Field(
        default="judge",
        description="judge: the judge's verdict; rule: a deterministic check computed by "
        "amaris without an LLM call (verdict 4 when it holds, 0 when not).",
    )
    reason: str = Field(
        description="The judge's reason (of the first sample), or what the rule found."
    )
    samples: list[int | float] | None = Field(
        default=None,
        description="The k verdicts whose mean is the verdict "
        "(agents.scorer.samples > 1); null otherwise.",
    )
    agreement: float | None = Field(
        default=None,
        description="Share of the samples that round to their most common "
        "value: 1 when the k verdicts agree (agents.scorer.samples > 1); null otherwise.",
    )
    from_logprobs: int | None = Field(
        default=None,
        description="How many of the judge replies gave this verdict as an "
        "expected value from logprobs (the others gave none: their plain verdict is used); "
        "null when agents.scorer.logprobs is off.",
    )


ScoreStatus = Literal["scored", "unscored", "invalid"]
RewardVector = dict[str, float | None]
"""A reward per objective, by key (:mod:`amaris.rubric.reward_vector`)."""


class ScoreResponse(BaseModel):
    """Answer of ``POST /score`` (and one item of ``/batch_score``)."""

    score: float | None = Field(
        description="Reward in [0, 1]; null when unscored (see scoring.on_failure)."
    )
    rubric_version: int | None = Field(description="Rubric version that produced the score.")
    status: ScoreStatus
    rollout_id: str | None = None
    reason: str | None = Field(
        default=None,
        description="Why the rollout is unscored/invalid; on a scored rollout, "
        "'degenerate_reply: ...' when the pre-check gave it the floor reward unjudged.",
    )
    cached: bool = Field(default=False, description="Answered from the score cache.")
    judge: Literal["cheap", "strong"] | None = Field(
        default=None,
        description="The judge whose verdicts made the reward: 'strong' (the scorer) or "
        "'cheap' (the cascade's cheap scorer, scoring.cascade); null when no judge decided "
        "(unscored, the pre-check's floor, rule criteria alone).",
    )
    judge_mode: Literal["pointwise", "listwise"] | None = Field(
        default=None,
        description="How the judge saw the rollout: alone ('pointwise') or in one call with "
        "the other rollouts of its group ('listwise', scoring.group_mode); null when no "
        "judge decided.",
    )
    truncated: list[str] = Field(
        default_factory=list, description="Fields cut to scoring.max_field_chars before judging."
    )
    breakdown: list[CriterionResult] | None = None
    late: bool = Field(
        default=False,
        description="The rollout's step was completed already: it is logged, not analysed "
        "(the step's rubric update did not see it). Counted in amaris_rollouts_late_total.",
    )
    rewards: RewardVector | None = Field(
        default=None,
        description="A reward per objective, each in [0, 1]: per criterion id of rubric_version "
        "its normalised verdict (a pitfall: 1 - its presence, how far it was avoided); "
        "'anchors' and 'adaptive': score's formula over those criteria alone (null when the "
        "rubric has none). A degenerate reply: the floor on every key. Null unless scored.",
    )
    turns: TurnRewards = None


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


UpdateKind = Literal[
    "skipped", "no_update", "rejected", "unchanged", "published", "already_published"
]
"""What became of a scope's rubric update: ``skipped`` (not an update step), ``no_update``
(no summary to update from), ``rejected`` (by the guardrails, the canary, or an updater
whose output was invalid), ``unchanged`` (a valid proposal that changes nothing),
``published`` (a new version), ``already_published`` (by an earlier run of the step)."""
WaitStatus = Literal["updated", "unchanged", "rejected", "failed", "pending"]
"""What waiting for a step answers: what its finished run did to the rubric (``updated``,
``unchanged``, ``rejected``); ``failed``: the run failed; ``pending``: not over yet."""
RubricsMode = Literal["global", "per_instance"]
"""``memory.rubrics_mode``: one rubric, or one per input."""


class CriterionPublic(BaseModel):
    """A criterion as shown by ``GET /rubrics``."""

    id: str
    text: str
    weight: float
    is_anchor: bool
    # A rule's options differ by kind (amaris.settings.criteria): shown as configured.
    rule: JSONDict | None = Field(
        default=None,
        description="The deterministic check computed instead of a judge question "
        "(kind exact, numeric, regex, length or json, and its options); null = judged.",
    )
    findings: list[str] = Field(
        default_factory=list,
        description="The step findings the update that wrote this criterion cited "
        "(behaviour tags, fidelity_alarm, criterion ids); empty for configured criteria.",
    )


class RubricPublic(BaseModel):
    """The rubric version in force."""

    version: int
    parent: int | None
    created_at: str
    step: int | None
    origin: Literal["config", "updater", "rollback", "bootstrap"]
    anchors: list[CriterionPublic]
    adaptive: list[CriterionPublic]


class StructuredOutputStatus(BaseModel):
    """How one agent's replies are constrained now."""

    mode: Literal["json_schema", "json_object", "none", "configured"] = Field(
        description="json_schema, json_object, none (the prompt alone) or configured "
        "(agents.<agent>.response_format sent as is)."
    )
    reason: str = Field(
        description="Why: the default, the configuration, or the refusal "
        "that made amaris fall back."
    )


class JudgeReachability(BaseModel):
    """Whether an agent's LLM endpoint answers (``server.probe_judges_seconds``)."""

    reachable: bool
    since: str = Field(description="When it became so (ISO 8601, UTC).")
    error: str | None = Field(default=None, description="Why it is unreachable.")


class HealthResponse(BaseModel):
    """Answer of ``GET /healthz``."""

    status: Literal["ok", "degraded"] = Field(
        description="degraded: a durable write failed and has not succeeded since "
        "(see `degraded_causes`); /score and /complete answer 503 meanwhile."
    )
    degraded_causes: dict[str, str] = Field(
        default_factory=dict,
        description="Per store whose last durable write failed (rollout log, step "
        "registry): the cause (full disk, locked database...) and since when. Cleared by "
        "the next write there that succeeds.",
    )
    version: str
    judge_backend: str = Field(description="'offline (rule-based, NOT an LLM)' or the endpoint.")
    offline_judge: bool
    offline_agents: list[str] = Field(
        default_factory=list,
        description="Agents served by the offline rule-based agents, "
        "not an LLM: all six with no endpoint configured, else those with "
        "client.<agent>.offline.",
    )
    judge_model: str
    rubric_version: int
    counters: dict[str, int] = Field(
        default_factory=dict,
        description="Rollouts answered since start, once stored: scored, cached, degenerate "
        "or unscored (one each); unstored: refused because they could not be stored; "
        "overloaded: refused by the judge's queue; truncated.<cause>: rollouts judged with "
        "their text cut.",
    )
    structured_output: dict[str, StructuredOutputStatus] = Field(
        default_factory=dict, description="Per agent: the structured-output mode in use and why."
    )
    judges: dict[str, JudgeReachability] = Field(
        default_factory=dict,
        description="Per agent with an LLM endpoint, once probed: whether it answers, since "
        "when, and why not (server.probe_judges_seconds; the offline agents have none).",
    )
    auditor: str | None = Field(
        default=None,
        description="The audit judge's model ('offline-rules' for the offline judge); null "
        "while the auditor is off (neither client.auditor nor agents.auditor is set).",
    )
    scoring_paused: str | None = Field(
        default=None,
        description="Why /score answers 503: the fidelity alarm that paused scoring "
        "(audit.on_alarm: pause) until `amaris audit ack`; null while scoring runs.",
    )


class ErrorDetail(BaseModel):
    """One problem with a request, naming its field."""

    field: str
    message: str


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body."""

    error: str
    detail: list[ErrorDetail] = Field(default_factory=list)
