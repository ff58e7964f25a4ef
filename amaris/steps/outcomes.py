"""What a step's run ends with, and what waiting for a step answers: the scopes' outcomes are
:mod:`amaris.step_answer`'s models, made here from the agents' (:func:`scope_outcome`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from amaris.agents.schemas import AggregatedBehaviour
from amaris.memory.models import StepRecord, StepStatus
from amaris.models import JSONValue

# The answer's vocabulary lives with the HTTP models, which the client reads it from too;
# importable here still, for the importers.
from amaris.models import RubricsMode as RubricsMode
from amaris.models import UpdateKind as UpdateKind
from amaris.models import WaitStatus as WaitStatus

# A scope's outcome is the step answer's model, which the client returns too (it needs
# pydantic only); importable here, with the step path's other outcomes.
from amaris.step_answer import STORED, HackingBehaviour
from amaris.step_answer import AnyScopeOutcome as AnyScopeOutcome
from amaris.step_answer import Dropped as Dropped
from amaris.step_answer import OlderScopeOutcome as OlderScopeOutcome
from amaris.step_answer import ScopeOutcome as ScopeOutcome
from amaris.step_answer import UpdateOutcome as UpdateOutcome

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


def scope_outcome(
    update: UpdateOutcome,
    rollouts: int,
    hacking: Iterable[AggregatedBehaviour],
    dropped: list[Dropped],
) -> ScopeOutcome:
    """A scope's outcome in a step, as it is kept and answered: the summarizer's hacking
    behaviours read into the answer's :class:`~amaris.step_answer.HackingBehaviour`."""
    found = [HackingBehaviour.model_validate(b, from_attributes=True) for b in hacking]
    return ScopeOutcome.of(update, rollouts=rollouts, hacking=found, dropped=dropped)


ScopeOutcomes = Mapping[str, AnyScopeOutcome]
"""A step run's outcome per scope."""
_SCOPES = TypeAdapter(dict[str, AnyScopeOutcome])


def scopes_json(scopes: ScopeOutcomes | None) -> JSONValue:
    """The outcome per scope as the step registry stores it: each scope's JSON
    (:data:`~amaris.step_answer.STORED`)."""
    if scopes is None:
        return None
    return _SCOPES.dump_python(dict(scopes), mode="json", context=STORED)


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
