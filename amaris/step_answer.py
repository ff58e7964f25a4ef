"""A step's outcome per scope, and what waiting for a step answers: one set of models from
the step flow to the HTTP answer (``GET /rubric_status/wait``, ``GET /steps/{step}``) and
:class:`~amaris.client.RewardClient`, which returns the same :class:`WaitAnswer`.

They need pydantic only, so the trainer side reads them without the server stack. The
server's richer objects become them where a step's outcome is made: the rubric canary's
report is a :class:`CanarySummary` with its probes (left out of the JSON), the summarizer's
behaviours are read into :class:`HackingBehaviour` (:mod:`amaris.steps.outcomes`).
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from amaris.models import RubricsMode, UpdateKind, WaitStatus

StrategyName = Literal["MAINTENANCE", "CORRECTIVE", "ADVANCEMENT"]
"""The updater's strategy for a rubric update."""

STORED = {"stored": True}
"""The serialization context of the step registry's JSON: a scope's ``reason`` only when it
has one, as every version stored it (an answer says ``null``)."""


def _stored(info: SerializationInfo) -> bool:
    context = info.context
    return isinstance(context, dict) and context.get("stored") is True


def _fields_schema(schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
    """The JSON schema of a model whose serializer only leaves keys out: its fields'."""
    return handler({key: value for key, value in schema.items() if key != "serialization"})


class KeyedAnswer(BaseModel):
    """Read by key too, as the JSON it is (``answer["status"]``,
    ``answer["scopes"]["global"]["outcome"]``): deprecated, kept for code that reads the
    answer as a dictionary; read the attributes instead, or ``model_dump(mode="json")``
    for the JSON."""

    def __getitem__(self, key: str) -> Any:
        _warn(key)
        return self._value(key)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (a field, or a key an older server answered), else
        ``default``; deprecated like indexing."""
        _warn(key)
        try:
            return self._value(key)
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        """Whether the answer's JSON has ``key``; deprecated like indexing."""
        _warn(str(key))
        return key in self.model_dump()

    def _value(self, key: str) -> Any:
        if key in type(self).model_fields:
            return getattr(self, key)
        extra = self.model_extra or {}
        if key in extra:
            return extra[key]
        raise KeyError(key)


def _warn(key: str) -> None:
    warnings.warn(
        f"reading a step answer by key is deprecated: read its attribute ({key}) instead",
        DeprecationWarning,
        stacklevel=3,
    )


class CanarySummary(KeyedAnswer):
    """The rubric canary's verdict on a scope's candidate rubric, as a step's outcome keeps
    and answers it: the canary's report
    (:class:`~amaris.trust.rubric_canary.report.CanaryReport`) without its probes."""

    outcome: Literal["passed", "refused", "skipped"]
    reason: str = ""
    judge_calls: int = 0
    """Scorer calls the canary made (each ``agents.scorer.samples`` requests)."""
    budget: int = 0
    """Most scorer calls it could make: ``max_share`` of the step's rollouts, plus the sure
    prompt's set."""
    current_gap: float | None = None
    candidate_gap: float | None = None
    anchors_gap: float | None = None
    """The mean gap under the anchors alone."""


class HackingBehaviour(KeyedAnswer):
    """A reward-hacking behaviour the scope's summary found across the step's rollouts: how
    many show it, and which."""

    model_config = ConfigDict(frozen=True)

    tag: str
    description: str = ""
    count: int
    share: float
    rollout_ids: list[str] = Field(default_factory=list)


class Dropped(KeyedAnswer):
    """An agent's output the step went on without: the agent failed permanently on that
    piece of the step (invalid output after the re-ask, a reply cut by ``max_tokens``, a
    context overflow)."""

    model_config = ConfigDict(frozen=True)

    agent: str
    part: str
    """Which piece: ``rollout <id>``, ``chunk <label>``, ``all``, ``queries``, ``update``."""
    reason: str

    @classmethod
    def of(cls, agent: str, part: str, error: BaseException) -> Dropped:
        """The record of ``agent``'s output for ``part``, dropped because of ``error``."""
        return cls(agent=agent, part=part, reason=f"{type(error).__name__}: {error}"[:500])


_NOT_ASKED: frozenset[UpdateKind] = frozenset({"skipped", "no_update"})


class UpdateOutcome(KeyedAnswer):
    """What became of a scope's rubric update.

    As JSON: ``outcome`` and ``reason`` first (``reason`` ``null`` when there is none; in
    the step registry's JSON, :data:`STORED`, only when set), ``canary`` and
    ``retired_uninformative`` only when set, ``strategy`` only when the updater was asked
    (``null`` when its output was invalid).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: UpdateKind = Field(
        description="skipped, no_update, rejected, unchanged, published or already_published."
    )
    reason: str | None = Field(default=None, description="Why; null when there is no reason.")
    version: int
    """The rubric version in force for the scope after the update."""
    base_version: int
    """The version the update started from."""
    strategy: StrategyName | None = None
    canary: CanarySummary | None = None
    """The rubric canary's verdict on the candidate."""
    retired_uninformative: list[str] | None = None
    """Criteria retired with the update for being uninformative."""

    @model_serializer(mode="wrap")
    def _as_answered(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if not isinstance(data, dict):  # pragma: no cover - a model serialises to a dict
            return data
        for name in ("canary", "retired_uninformative"):
            if getattr(self, name) is None:
                data.pop(name, None)
        if self.reason is None and _stored(info):
            data.pop("reason", None)
        if self.outcome in _NOT_ASKED:
            data.pop("strategy", None)
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return _fields_schema(schema, handler)


class ScopeOutcome(UpdateOutcome):
    """A scope's outcome in a step: its update's, with the rollouts it had, the hacking
    its summary found and the outputs it went on without."""

    rollouts: int
    hacking: list[HackingBehaviour]
    dropped: list[Dropped]

    @classmethod
    def of(
        cls,
        update: UpdateOutcome,
        rollouts: int,
        hacking: list[HackingBehaviour],
        dropped: list[Dropped],
    ) -> ScopeOutcome:
        return cls(**dict(update), rollouts=rollouts, hacking=hacking, dropped=dropped)


class OlderScopeOutcome(KeyedAnswer):
    """A scope's outcome as an older version recorded it, which :class:`ScopeOutcome` does
    not read (or a newer server answers it): the ``outcome`` and ``reason`` every version
    wrote, its other fields as they are. The step registry keeps it as it was recorded."""

    model_config = ConfigDict(frozen=True, extra="allow")

    outcome: UpdateKind
    reason: str | None = None

    @model_serializer(mode="wrap")
    def _as_answered(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if isinstance(data, dict) and "reason" not in self.model_fields_set and _stored(info):
            data.pop("reason", None)
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return _fields_schema(schema, handler)


AnyScopeOutcome = Annotated[ScopeOutcome | OlderScopeOutcome, Field(union_mode="left_to_right")]
"""A scope's outcome: as this version writes it, else as another one recorded it."""

WAIT_RULE = (
    "failed: the step's pipeline failed (see error; `amaris repair` re-runs it). Else what "
    "the finished step did to the rubric: updated when any scope published a new version "
    "(in this run or an earlier one of the step); else rejected when any scope's update was "
    "rejected (guardrails, rubric canary, invalid updater output: see the scope's reason); "
    "else unchanged (not an update step, nothing to update from, a proposal that changes "
    "nothing; also when no step was started). pending: the timeout passed first."
)


class WaitAnswer(KeyedAnswer):
    """Outcome of waiting for a step's pipeline."""

    status: WaitStatus = Field(description=WAIT_RULE)
    mode: RubricsMode
    step: int | None
    error: str | None = None
    step_status: str | None = None
    """Where the step stands, when ``pending``."""
    scopes: dict[str, AnyScopeOutcome] | None = Field(
        default=None,
        description="Per scope, once the run ended: outcome, reason, rubric version, "
        "strategy, findings.",
    )
