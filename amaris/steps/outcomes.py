"""What a step's run ends with, and what waiting for a step answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from amaris.memory.models import StepRecord, StepStatus
from amaris.models import JSONValue

WaitStatus = Literal["updated", "failed", "pending"]
"""``updated``: the step's run finished; ``failed``: it failed; ``pending``: not over yet."""
RubricsMode = Literal["global", "per_instance"]


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
    """The run's outcome per scope: JSON the coordinator passes on without reading it."""


@dataclass(frozen=True)
class StepOutcome:
    """How a step's run ended, as this process tells its waiters."""

    error: str | None = None
    scopes: JSONValue = None
    """The run's outcome per scope, as the flow (or the registry) gave it: JSON the
    coordinator passes on without reading it."""

    @classmethod
    def of(cls, record: StepRecord) -> StepOutcome:
        """The outcome a registry record keeps."""
        return cls(error=record.error, scopes=record.scopes)


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
