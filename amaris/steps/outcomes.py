"""What a step's run ends with, and what waiting for a step answers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from amaris.memory.models import StepRecord, StepStatus
from amaris.models import JSONValue

UpdateKind = Literal[
    "skipped", "no_update", "rejected", "unchanged", "published", "already_published"
]
"""What became of a scope's rubric update: ``skipped`` (not an update step), ``no_update``
(no summary to update from), ``rejected`` (by the guardrails, the canary, or an updater
whose output was invalid), ``unchanged`` (a valid proposal that changes nothing),
``published`` (a new version), ``already_published`` (by an earlier run of the step)."""
RubricStatus = Literal["updated", "unchanged", "rejected"]
"""What a finished step did to the rubric (:func:`rubric_status`)."""
WaitStatus = Literal["updated", "unchanged", "rejected", "failed", "pending"]
"""The step's :data:`RubricStatus` once its run finished; ``failed``: the run failed;
``pending``: not over yet."""
RubricsMode = Literal["global", "per_instance"]


def rubric_status(outcomes: Iterable[UpdateKind]) -> RubricStatus:
    """What a step did to the rubric, from its scopes' update outcomes: ``updated`` when any
    scope published a new version (in this run or an earlier one), else ``rejected`` when
    any scope's update was rejected, else ``unchanged`` (none was asked, or none changed)."""
    kinds = set(outcomes)
    if kinds & {"published", "already_published"}:
        return "updated"
    return "rejected" if "rejected" in kinds else "unchanged"


class ScopeVerdict(BaseModel):
    """What became of a scope's rubric update, as a step's outcome records it: the
    ``outcome`` and ``reason`` of :class:`~amaris.tasks.models.ScopeOutcome`'s JSON."""

    model_config = ConfigDict(frozen=True)

    outcome: UpdateKind
    reason: str | None = None


_VERDICTS = TypeAdapter(dict[str, ScopeVerdict])


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


class StepRun(BaseModel):
    """What a step's run tells its coordinator (the flow in this process, or a run that
    another process executed, read from the step registry)."""

    model_config = ConfigDict(frozen=True)

    step: int
    scopes: JSONValue = None
    """The run's outcome per scope (each scope's :class:`~amaris.tasks.models.ScopeOutcome`
    JSON): the coordinator passes it on, reading each scope's :class:`ScopeVerdict` only."""


@dataclass(frozen=True)
class StepOutcome:
    """How a step's run ended, as this process tells its waiters."""

    error: str | None = None
    scopes: JSONValue = None
    """The run's outcome per scope, as the flow (or the registry) gave it (see
    :attr:`StepRun.scopes`)."""

    @classmethod
    def of(cls, record: StepRecord) -> StepOutcome:
        """The outcome a registry record keeps."""
        return cls(error=record.error, scopes=record.scopes)

    def verdicts(self) -> dict[str, ScopeVerdict]:
        """Each scope's update outcome (none when the run gave no scopes).

        Raises:
            pydantic.ValidationError: the scopes are not a run's per-scope outcomes.
        """
        return _VERDICTS.validate_python(self.scopes or {})

    def rubric(self) -> RubricStatus:
        """What the run did to the rubric (:func:`rubric_status`)."""
        return rubric_status(verdict.outcome for verdict in self.verdicts().values())


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
    scopes: JSONValue = None
