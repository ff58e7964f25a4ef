"""A step completes once: rollouts that race past ``pipeline.rollouts_per_step`` start its
flow one time, however many of them reach the threshold together."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import StepRegistry
from amaris.steps.coordinator import StepCoordinator
from amaris.steps.outcomes import StepRun
from tests.support.rollout_logs import KINDS, memory_log
from tests.support.settings import make_settings
from tests.support.step_runs import scope_outcome

PER_STEP = 2
SENT = 8
DEADLINE_S = 60.0
"""Generous bound of every wait below (never part of an assertion)."""


def scored(rid: str) -> RolloutRecord:
    return RolloutRecord.model_validate(
        {"rollout": {"id": rid, "input": "What is 2+2?", "output": "4"}, "score": 1.0}
    )


class OneRun:
    """The coordinator's launcher: every start gets the one run the test settles."""

    def __init__(self) -> None:
        self.starts: list[tuple[int, bool]] = []
        self.started = asyncio.Event()
        self.outcome: concurrent.futures.Future[StepRun] = concurrent.futures.Future()

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        self.starts.append((step, new_attempt))
        self.started.set()
        return self.outcome


@pytest.mark.parametrize("kind", KINDS)
async def test_rollouts_racing_past_the_threshold_start_the_step_once(
    kind: str, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, **{"pipeline.rollouts_per_step": PER_STEP})
    client = QdrantClient(":memory:")
    steps = StepRegistry(client, "race")
    launcher = OneRun()
    coordinator = StepCoordinator(settings, memory_log(kind, "race"), steps, launcher)
    try:
        # Every call reads the step as open before any is logged (they share one batched
        # write), so all of them count towards the threshold; all but one find it reached
        # by another rollout, whose start is still under way.
        await asyncio.gather(*(coordinator.record(0, scored(f"r{i}")) for i in range(SENT)))
        async with asyncio.timeout(DEADLINE_S):
            await launcher.started.wait()
        assert coordinator.status(0) == "completing"
        launcher.outcome.set_result(StepRun(step=0, scopes={"global": scope_outcome("published")}))
        result = await coordinator.wait(0, timeout=DEADLINE_S)
    finally:
        await coordinator.close()
    assert launcher.starts == [(0, False)]
    assert result.status == "updated"
    record = steps.get(0)
    assert record is not None
    assert record.status == "done"
    assert record.rollout_count >= PER_STEP
