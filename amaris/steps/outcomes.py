"""What a step's run ends with, and what waiting for a step answers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from amaris.agents.schemas import AggregatedBehaviour, Strategy
from amaris.memory.models import StepRecord, StepStatus
from amaris.models import JSONValue

# The answer's vocabulary lives with the HTTP models, which the client reads it from too;
# importable here still, for the importers.
from amaris.models import RubricsMode as RubricsMode
from amaris.models import UpdateKind as UpdateKind
from amaris.models import WaitStatus as WaitStatus
from amaris.trust.rubric_canary.report import CanaryReport

RubricStatus = Literal["updated", "unchanged", "rejected"]
"""What a finished step did to the rubric (:func:`rubric_status`)."""


def rubric_status(outcomes: Iterable[UpdateKind]) -> RubricStatus:
    """What a step did to the rubric, from its scopes' update outcomes: ``updated`` when any
    scope published a new version (in this run or an earlier one), else ``rejected`` when
    any scope's update was rejected, else ``unchanged`` (none was asked, or none changed)."""
    kinds = set(outcomes)
    if kinds & {"published", "already_published"}:
        return "updated"
    return "rejected" if "rejected" in kinds else "unchanged"


class Dropped(BaseModel):
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


class UpdateOutcome(BaseModel):
    """What became of a scope's rubric update.

    As JSON (what the step registry, ``GET /steps`` and the memory keep): ``reason``,
    ``canary`` and ``retired_uninformative`` only when set, ``strategy`` only when the
    updater was asked (``null`` when its output was invalid).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: UpdateKind
    version: int
    """The rubric version in force for the scope after the update."""
    base_version: int
    """The version the update started from."""
    strategy: Strategy | None = None
    reason: str | None = None
    canary: CanaryReport | None = None
    """The rubric canary's report on the candidate (its probes left out of the JSON)."""
    retired_uninformative: list[str] | None = None
    """Criteria retired with the update for being uninformative."""

    @model_serializer(mode="wrap")
    def _as_recorded(self, handler: SerializerFunctionWrapHandler) -> object:
        data = handler(self)
        if not isinstance(data, dict):  # pragma: no cover - a model serialises to a dict
            return data
        for name in ("reason", "canary", "retired_uninformative"):
            if getattr(self, name) is None:
                data.pop(name, None)
        if self.outcome in _NOT_ASKED:
            data.pop("strategy", None)
        if isinstance(data.get("canary"), dict):
            data["canary"].pop("probes", None)
        return data


class ScopeOutcome(UpdateOutcome):
    """A scope's outcome in a step: its update's, with the rollouts it had, the hacking
    its summary found and the outputs it went on without. One model from the step flow to
    the HTTP answer; JSON only in the step registry (:func:`scopes_json`) and for the
    client, which types it key for key (:class:`amaris.client.ScopeAnswer`)."""

    rollouts: int
    hacking: list[AggregatedBehaviour]
    dropped: list[Dropped]

    @classmethod
    def of(
        cls,
        update: UpdateOutcome,
        rollouts: int,
        hacking: list[AggregatedBehaviour],
        dropped: list[Dropped],
    ) -> ScopeOutcome:
        return cls(**dict(update), rollouts=rollouts, hacking=hacking, dropped=dropped)


class OlderScopeOutcome(BaseModel):
    """A scope's outcome as an older version recorded it, which :class:`ScopeOutcome` does
    not read: the ``outcome`` and ``reason`` every version wrote, its other fields as they
    are (records of older versions must stay readable)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    outcome: UpdateKind
    reason: str | None = None

    @model_serializer(mode="wrap")
    def _as_recorded(self, handler: SerializerFunctionWrapHandler) -> object:
        data = handler(self)
        if isinstance(data, dict) and "reason" not in self.model_fields_set:
            data.pop("reason", None)
        return data


AnyScopeOutcome = Annotated[ScopeOutcome | OlderScopeOutcome, Field(union_mode="left_to_right")]
"""A scope's outcome: as this version writes it, else as an older one recorded it."""
ScopeOutcomes = Mapping[str, AnyScopeOutcome]
"""A step run's outcome per scope."""
_SCOPES = TypeAdapter(dict[str, AnyScopeOutcome])


def scopes_json(scopes: ScopeOutcomes | None) -> JSONValue:
    """The outcome per scope as the step registry stores it: each scope's JSON."""
    return None if scopes is None else _SCOPES.dump_python(dict(scopes), mode="json")


def recorded_scopes(record: StepRecord) -> ScopeOutcomes | None:
    """The outcome per scope a registry record keeps, read back (the storage boundary).

    Raises:
        pydantic.ValidationError: a scope's JSON has no valid ``outcome``: it is not a run's
            outcome of any version.
    """
    return None if record.scopes is None else _SCOPES.validate_python(record.scopes)


class StepRun(BaseModel):
    """What a step's run tells its coordinator (the flow in this process, or a run that
    another process executed, read from the step registry)."""

    model_config = ConfigDict(frozen=True)

    step: int
    scopes: ScopeOutcomes | None = None
    """The run's outcome per scope."""


@dataclass(frozen=True)
class StepOutcome:
    """How a step's run ended, as this process tells its waiters."""

    error: str | None = None
    scopes: ScopeOutcomes | None = None
    """The run's outcome per scope, as the flow (or the registry) gave it."""

    @classmethod
    def of(cls, record: StepRecord) -> StepOutcome:
        """The outcome a registry record keeps (see :func:`recorded_scopes`)."""
        return cls(error=record.error, scopes=recorded_scopes(record))

    def rubric(self) -> RubricStatus:
        """What the run did to the rubric (:func:`rubric_status`)."""
        return rubric_status(outcome.outcome for outcome in (self.scopes or {}).values())


class WaitResult(BaseModel):
    """What :meth:`~amaris.steps.coordinator.StepCoordinator.wait` answers."""

    model_config = ConfigDict(frozen=True)

    status: WaitStatus
    mode: RubricsMode
    step: int | None
    """The step waited for; None when no step was started yet."""
    error: str | None = None
    step_status: StepStatus | Literal["unknown"] | None = None
    """Set when ``pending``: where the step stands."""
    scopes: ScopeOutcomes | None = None
