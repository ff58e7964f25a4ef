"""Time each training step spends waiting on the judge, measured at the gateway.

What a step's Prefect run shows (an artifact and a log line), so a step that took an hour
because its judge was slow says so. Counted per step from the pipeline gateway's calls:
from the moment a call asks for a concurrency slot to its answer or failure, retries of
the step's tasks included (each is a call of its own).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import openai


@dataclass
class StepJudgeWait:
    """One step's judge calls and the time they took."""

    calls: int = 0
    """Calls made (failed ones included)."""
    failed: int = 0
    """Calls that ended in an error."""
    timed_out: int = 0
    """Failed calls whose last attempt timed out."""
    wait_seconds: float = 0.0
    """Wall time during which at least one of the step's calls was waiting on the judge."""
    call_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds of calls per agent, summed (concurrent calls each count)."""
    _outstanding: int = 0
    _since: float = 0.0


def _timed_out(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, openai.APITimeoutError | TimeoutError):
            return True
        cause = cause.__cause__
    return False


class JudgeWaits:
    """Per-step judge wait, kept until the step's flow takes it (:meth:`pop`)."""

    def __init__(self) -> None:
        self._steps: dict[int, StepJudgeWait] = {}

    @contextmanager
    def measure(self, step: int, agent: str) -> Iterator[None]:
        """Count the call made inside the block as ``agent``'s, for ``step``."""
        wait = self._steps.setdefault(step, StepJudgeWait())
        started = time.perf_counter()
        if wait._outstanding == 0:
            wait._since = started
        wait._outstanding += 1
        try:
            yield
        except BaseException as exc:
            wait.failed += 1
            wait.timed_out += _timed_out(exc)
            raise
        finally:
            ended = time.perf_counter()
            wait.calls += 1
            wait.call_seconds[agent] = wait.call_seconds.get(agent, 0.0) + ended - started
            wait._outstanding -= 1
            if wait._outstanding == 0:
                wait.wait_seconds += ended - wait._since

    def pop(self, step: int) -> StepJudgeWait:
        """The judge wait of ``step`` so far, forgotten here (zero when it made no call)."""
        return self._steps.pop(step, None) or StepJudgeWait()
