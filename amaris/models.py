"""Pydantic models at the HTTP boundary: the AMARIS request body and amaris's responses."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Required, TypedDict

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from amaris.jsonfile import JSONDict

MAX_JSON_DEPTH = 32
"""Deepest nesting of a free-form JSON value (``rollout.metadata``, the training metadata's
extra fields, ``/get_reward`` labels): ``{}`` and ``[]`` are one level."""
MAX_EXTRA_NAME = 200
"""Longest name of an extra field of the training metadata."""


def valid_text(value: str) -> str:
    """``value``, if it is Unicode text that can be stored and sent back (UTF-8).

    Raises:
        PydanticCustomError: it holds a lone surrogate (``"\\ud800"`` in JSON), which no
            UTF-8 encoder accepts: stored, it would fail every later read of its step.
    """
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PydanticCustomError(
                "invalid_text",
                "has a lone surrogate (U+{code}) at character {at}: not valid Unicode text",
                {"code": f"{ord(value[exc.start]):04X}", "at": exc.start},
            ) from None
    return value


def storable(value: str) -> str:
    """``value`` with every lone surrogate replaced by U+FFFD: text amaris did not write
    (a judge's reply, an error quoting it) made safe to store, log and send back."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Through UTF-16, surrogate pairs are joined again and lone ones replaced.
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def valid_json(value: Any) -> Any:
    """``value``, if it is a JSON value amaris can store: strings (keys too) valid text,
    numbers finite, nesting at most :data:`MAX_JSON_DEPTH` levels.

    Iterative, so a deep value cannot exhaust the stack here.

    Raises:
        PydanticCustomError: the first problem found, with where it is (``$.key[0]``).
    """
    stack: list[tuple[Any, int, str]] = [(value, 0, "$")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise PydanticCustomError(
                    "json_too_deep",
                    "is nested deeper than {limit} levels (at {where})",
                    {"limit": MAX_JSON_DEPTH, "where": _short(where)},
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    _text_at(str(key), f"a key of {where}")
                    stack.append((child, depth + 1, f"{where}.{key}"))
            else:
                stack.extend((child, depth + 1, f"{where}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, str):
            _text_at(item, where)
        elif isinstance(item, float) and not math.isfinite(item):
            raise PydanticCustomError(
                "json_number",
                "has {value} at {where}: NaN and Infinity are not JSON numbers",
                {"value": str(item), "where": _short(where)},
            )
    return value


def _text_at(text: str, where: str) -> None:
    try:
        valid_text(text)
    except PydanticCustomError as exc:
        raise PydanticCustomError(
            "invalid_text",
            "{problem} (in {where})",
            {"where": _short(where), "problem": exc.message()},
        ) from None


def _short(where: str) -> str:
    return where if len(where) <= 120 else where[:117] + "..."


def json_chars(value: Any) -> int:
    """Size of a JSON value as amaris counts it against ``scoring.max_field_chars``: the
    characters of its compact JSON encoding."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


Text = Annotated[str, AfterValidator(valid_text)]
"""A string field of a request: valid Unicode text (see :func:`valid_text`)."""
JSONValue = Annotated[Any, AfterValidator(valid_json)]
"""A free-form JSON value of a request (see :func:`valid_json`)."""
JSONObject = Annotated[JSONDict, AfterValidator(valid_json)]
"""A free-form JSON object of a request (see :func:`valid_json`)."""


class Rollout(BaseModel):
    """One policy sample to score (AMARIS ``rollout``)."""

    model_config = ConfigDict(extra="forbid")

    id: Text = Field(min_length=1, max_length=512, description="Unique rollout id within its step.")
    input: Text = Field(description="The prompt the policy answered.")
    output: Text = Field(description="The policy's response.")
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

    def text_sizes(self) -> Iterator[tuple[str, int]]:
        """Every free-text field that is set, with its size in characters (a JSON value:
        :func:`json_chars`), named as in the request (``rollout.output``,
        ``metadata.<extra field>``)."""
        rollout = self.rollout
        for name in ("id", "input", "output", "supplemental_context", "group_id"):
            value = getattr(rollout, name)
            if value is not None:
                yield f"rollout.{name}", len(value)
        if rollout.metadata is not None:
            yield "rollout.metadata", json_chars(rollout.metadata)
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
