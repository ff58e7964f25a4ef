"""The coordinator starts a step through a :class:`~amaris.steps.launcher.StepLauncher`,
and the step's outcome stays one typed model, :class:`~amaris.steps.outcomes.ScopeOutcome`,
from the launcher's run to the answer of ``GET /rubric_status/wait`` (whose JSON keeps its
shape: ``outcome`` and ``reason`` first, ``reason`` null when unset). Real parts: the
coordinator, the step registry (Qdrant in memory) and the rollout log (SQLite in memory)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import AsyncIterator

import pytest
from qdrant_client import QdrantClient

import amaris.scoring.canary_report
import tasks.models
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import StepRegistry
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog
from amaris.settings import load_settings
from amaris.step_answer import CanarySummary, WaitAnswer
from amaris.steps.coordinator import StepCoordinator, StepRunFailedError
from amaris.steps.launcher import StepLauncher
from amaris.steps.outcomes import (
    OlderScopeOutcome,
    ScopeOutcome,
    StepOutcome,
    StepRun,
    scopes_json,
)
from amaris.trust.rubric_canary.report import CanaryProbe, CanaryReport
from api.routes.steps import StepDetail
from tests.support.step_runs import settled

DEADLINE_S = 30.0
"""Generous bound of every wait below (never part of an assertion)."""
PROBE = CanaryProbe(id="p", kind="rollout", group="g", side="pass", current=1.0, candidate=1.0)
UNCHANGED = ScopeOutcome(
    outcome="unchanged",
    version=1,
    base_version=1,
    strategy="MAINTENANCE",
    canary=CanaryReport(outcome="skipped", reason="the proposal changes nothing", probes=[PROBE]),
    rollouts=6,
    hacking=[],
    dropped=[],
)
SCOPES = (
    '{"global":{"outcome":"unchanged","reason":null,"version":1,"base_version":1,'
    '"strategy":"MAINTENANCE","canary":{"outcome":"skipped","reason":"the proposal changes '
    'nothing","judge_calls":0,"budget":0,"current_gap":null,"candidate_gap":null,'
    '"anchors_gap":null},"rollouts":6,"hacking":[],"dropped":[]}}'
)
"""The scopes' JSON in an answer, byte for byte: the canary's probes left out, as in the
registry."""
ANSWER = (
    '{"status":"unchanged","mode":"global","step":2,"error":null,"step_status":null,'
    f'"scopes":{SCOPES}}}'
)


class Launches:
    """A launcher the test settles: it records each start and keeps the run's future."""

    def __init__(self) -> None:
        self.starts: list[tuple[int, bool]] = []
        self.runs: dict[int, concurrent.futures.Future[StepRun]] = {}

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        self.starts.append((step, new_attempt))
        self.runs[step] = concurrent.futures.Future()
        return self.runs[step]


class World:
    def __init__(self) -> None:
        self.qdrant = QdrantClient(":memory:")
        self.registry = StepRegistry(self.qdrant, "t")
        self.log = SqliteRolloutLog(":memory:", "t")
        self.coordinators: list[StepCoordinator] = []

    def coordinator(self, launcher: StepLauncher) -> StepCoordinator:
        coordinator = StepCoordinator(load_settings(None), self.log, self.registry, launcher)
        self.coordinators.append(coordinator)
        return coordinator


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = World()
    yield w
    for coordinator in w.coordinators:
        await coordinator.close()
    w.log.close()
    w.qdrant.close()


def scored(rid: str) -> RolloutRecord:
    return RolloutRecord.model_validate(
        {"rollout": {"id": rid, "input": "2+2?", "output": "4"}, "score": 1.0}
    )


async def test_the_launcher_starts_the_step_and_its_typed_outcome_is_the_answer(
    world: World,
) -> None:
    launcher = Launches()
    c = world.coordinator(launcher)
    await c.record(2, scored("r"))
    assert await c.complete(2) == "complete"
    await settled()
    assert launcher.starts == [(2, False)]
    launcher.runs[2].set_result(StepRun(step=2, scopes={"global": UNCHANGED}))
    answer = await c.wait(2, timeout=DEADLINE_S)
    # The launcher's model itself, not a copy read back from JSON.
    assert answer.scopes is not None and answer.scopes["global"] is UNCHANGED
    response = WaitAnswer.model_validate(answer, from_attributes=True)
    assert response.scopes is not None and response.scopes["global"] is UNCHANGED
    assert response.model_dump_json() == ANSWER


async def test_the_registry_keeps_the_outcome_as_json_and_gives_the_model_back(
    world: World,
) -> None:
    launcher = Launches()
    c = world.coordinator(launcher)
    await c.record(2, scored("r"))
    await c.complete(2)
    await settled()
    launcher.runs[2].set_result(StepRun(step=2, scopes={"global": UNCHANGED}))
    await c.wait(2, timeout=DEADLINE_S)
    record = world.registry.get(2)
    assert record is not None
    assert record.scopes == scopes_json({"global": UNCHANGED})
    assert "probes" not in record.scopes["global"]["canary"]
    # Read back at the storage boundary: the model again, its canary the summary it kept
    # (the report without its probes).
    read = StepOutcome.of(record)
    assert UNCHANGED.canary is not None
    summary = CanarySummary(**UNCHANGED.canary.model_dump(exclude={"probes"}))
    assert read.scopes == {"global": UNCHANGED.model_copy(update={"canary": summary})}
    assert read.rubric() == "unchanged"
    # A process that did not run the step answers it from the registry, the same bytes.
    recovered = world.coordinator(Launches())
    await recovered.recover()
    answer = await recovered.wait(2, timeout=DEADLINE_S)
    assert WaitAnswer.model_validate(answer, from_attributes=True).model_dump_json() == ANSWER
    detail = StepDetail(step=2, status="done", rubric=read.rubric(), scopes=read.scopes)
    assert detail.model_dump_json() == (
        f'{{"step":2,"status":"done","rubric":"unchanged","scopes":{SCOPES},"audit":null,"cost_usd":null}}'
    )


async def test_a_record_of_an_older_version_is_read_and_answered_as_it_was(
    world: World,
) -> None:
    # A scope outcome an older version wrote: no base_version, rollouts or dropped, and a
    # behaviour as the summarizer gave it.
    older = {
        "outcome": "published",
        "version": 2,
        "hacking": [{"tag": "Hedging", "note": "as written"}],
        "strategy": "CORRECTIVE",
    }
    world.registry.set(3, status="done", scopes={"global": older})
    c = world.coordinator(Launches())
    await c.recover()
    answer = await c.wait(3, timeout=DEADLINE_S)
    assert answer.status == "updated"
    assert answer.scopes is not None
    assert isinstance(answer.scopes["global"], OlderScopeOutcome)
    assert WaitAnswer.model_validate(answer, from_attributes=True).model_dump_json() == (
        '{"status":"updated","mode":"global","step":3,"error":null,"step_status":null,'
        '"scopes":{"global":{"outcome":"published","reason":null,"version":2,'
        '"hacking":[{"tag":"Hedging","note":"as written"}],"strategy":"CORRECTIVE"}}}'
    )
    assert scopes_json(answer.scopes) == {"global": older}  # written back as it was


async def test_a_failed_run_is_launched_again_as_a_new_attempt(world: World) -> None:
    launcher = Launches()
    c = world.coordinator(launcher)
    await c.record(5, scored("r"))
    await c.complete(5)
    await settled()
    launcher.runs[5].set_exception(StepRunFailedError("step run ended CRASHED"))
    failed = await c.wait(5, timeout=DEADLINE_S)
    assert (failed.status, failed.error, failed.scopes) == (
        "failed",
        "step run ended CRASHED",
        None,
    )
    assert await c.rerun(5) == "started"
    await settled()
    assert launcher.starts == [(5, False), (5, True)]
    launcher.runs[5].set_result(StepRun(step=5, scopes={}))
    assert (await c.wait(5, timeout=DEADLINE_S)).status == "unchanged"


def test_the_moved_models_are_importable_where_they_were() -> None:
    # Prefect's cached task results were pickled under these names.
    assert tasks.models.ScopeOutcome is ScopeOutcome
    assert amaris.scoring.canary_report.CanaryReport is CanaryReport
