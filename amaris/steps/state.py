"""What one process knows of each step: one :class:`StepState` per step."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from amaris.memory.models import StepStatus
from amaris.settings import PipelineSettings
from amaris.steps.errors import StepRefusedError
from amaris.steps.outcomes import RubricsMode, StepOutcome, WaitResult


@dataclass
class StepState:
    """What this process knows of one step."""

    status: StepStatus | None = None
    """None: rollouts are admitted to the step (``opening``), none is logged yet."""
    counted: int | None = None
    """Rollouts this process counted while the step is open; None once its run ended."""
    opening: int = 0
    """Rollouts admitted to the step while it is not known, until they are logged."""
    outcome: StepOutcome = field(default_factory=StepOutcome)
    event: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the step's run ends: wakes this process's waiters."""
    supervised: bool = False
    """This process awaits the step's run (its event is set when it ends)."""
    checked: float = 0.0
    """When the store was last asked about the open step (monotonic seconds)."""

    def answer(self, mode: RubricsMode, step: int) -> WaitResult:
        """What a wait for the step answers now: once its run ended, ``failed`` or what it
        did to the rubric, with its outcome."""
        if self.status not in ("done", "failed"):
            return WaitResult(
                status="pending", mode=mode, step=step, step_status=self.status or "unknown"
            )
        return WaitResult(
            status="failed" if self.status == "failed" else self.outcome.rubric(),
            mode=mode,
            step=step,
            error=self.outcome.error,
            scopes=self.outcome.scopes,
        )


class StepStates(dict[int, StepState]):
    """Every step this process has met, by number."""

    def of(self, step: int) -> StepState:
        """The state of ``step``, created (unknown) on first use."""
        state = self.get(step)
        if state is None:
            state = self[step] = StepState()
        return state

    def status(self, step: int) -> StepStatus | None:
        """The step's status as this process knows it."""
        state = self.get(step)
        return None if state is None else state.status

    def forget_if_unknown(self, step: int) -> None:
        """Drop the state of ``step`` if it holds nothing (no status, admission, waiter)."""
        state = self.get(step)
        if state is not None and state == StepState(event=state.event):
            del self[step]

    def known(self) -> dict[int, StepStatus]:
        """Status of every step with one."""
        return {s: st.status for s, st in self.items() if st.status is not None}

    def counted(self) -> dict[int, int]:
        """Rollouts counted per open step."""
        return {s: st.counted for s, st in self.items() if st.counted is not None}

    def refusal(self, pipeline: PipelineSettings, step: int) -> StepRefusedError | None:
        """Why a rollout may not go to ``step``, if it may not (see
        :meth:`~amaris.steps.coordinator.StepCoordinator.check`)."""
        if step > pipeline.max_step:
            return StepRefusedError(
                "out_of_range", f"is over pipeline.max_step ({pipeline.max_step})"
            )
        present = {s for s, st in self.items() if st.status is not None or st.opening}
        if step in present:
            return None
        newest = max(present, default=None)
        if newest is not None and step > newest + pipeline.max_steps_ahead:
            return StepRefusedError(
                "out_of_range",
                (
                    f"step {step} is more than pipeline.max_steps_ahead "
                    f"({pipeline.max_steps_ahead}) past the newest step ({newest})"
                ),
            )
        opened = sum(st.status == "open" or st.opening > 0 for st in self.values())
        if opened >= pipeline.max_open_steps:
            return StepRefusedError(
                "too_many_open",
                (
                    f"step {step} would open one more step; {opened} are open "
                    f"(pipeline.max_open_steps): complete steps first (POST /complete)"
                ),
            )
        return None

    def open_step(self) -> int:
        """The oldest open step, else the one after the newest step known (0: none)."""
        known = self.known()
        opened = [step for step, status in known.items() if status == "open"]
        return min(opened) if opened else max(known, default=-1) + 1

    def not_next(self, step: int) -> StepRefusedError | None:
        """Why ``step``, unknown here, cannot be completed: it is not the next step."""
        following = max(self.known(), default=-1) + 1
        if step == following or step in self.known():
            return None
        return StepRefusedError(
            "not_next",
            f"step {step} has no rollouts and is not the next step ({following}): "
            "nothing to complete",
            field="step",
        )
