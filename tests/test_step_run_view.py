"""What a step's Prefect run shows: amaris's log lines for the step, and artifacts that
all have keys (no result-storage clutter)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from amaris.app.wiring import create_app
from tests.conftest import make_settings
from tests.pipeline_helpers import score_step

pytestmark = pytest.mark.usefixtures("prefect_harness")

BEHAVIOURS = ["correct"] * 4 + ["hacking"] * 4


async def _step_run(name: str, since: datetime) -> tuple[list[Any], list[Any]]:
    """The logs and artifacts of the flow run called ``name`` that started after ``since``
    (other test files on this worker run steps of that number on the same Prefect
    server), through Prefect's client."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterName,
        FlowRunFilterStartTime,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.logging.handlers import APILogHandler

    await APILogHandler.aflush()  # the logs still queued in this process
    async with get_client() as prefect:
        runs = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[name]),
                                          start_time=FlowRunFilterStartTime(after_=since))
        )
        assert len(runs) == 1
        logs = await prefect.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[runs[0].id])), limit=200
        )
        artifacts = await prefect.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[runs[0].id])),
            limit=200,
        )
    return logs, artifacts


@pytest.fixture(scope="module")
def step_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], list[Any]]:
    """One step (8 rollouts, 4 of them hacking) run as a Prefect flow: its logs, artifacts."""
    amaris = logging.getLogger("amaris")
    level = amaris.level
    amaris.setLevel(logging.INFO)  # as `amaris serve` logs by default (logging.level)
    try:
        settings = make_settings(
            tmp_path_factory.mktemp("view"), **{"pipeline.rollouts_per_step": None}
        )
        since = datetime.now(UTC)
        with TestClient(create_app(settings, qdrant_location=":memory:")) as client:
            score_step(client, 1, BEHAVIOURS)
            assert client.post("/complete").json() == {"status": "complete"}
            done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
            assert done["status"] == "updated", done
            return asyncio.run(_step_run("step-1", since))
    finally:
        amaris.setLevel(level)


def test_the_step_run_shows_amaris_log_lines(step_run: tuple[list[Any], list[Any]]) -> None:
    logs, _ = step_run
    ours = {log.message: log for log in logs if log.name.startswith("amaris.")}
    assert "step 1: 8 rollouts to analyse in 1 scope(s)" in ours
    analysed = ours[
        "step 1: chunk 0 analysed, 8 rollouts (0 from an earlier attempt), 4 "
        "flagged for reward hacking"
    ]
    assert analysed.task_run_id is not None  # attached to the analyze task run too
    assert "step 1 ('global'): rubric update published (CORRECTIVE), version 1 -> 2" in ours


def test_the_step_run_artifacts_all_have_keys(step_run: tuple[list[Any], list[Any]]) -> None:
    _, artifacts = step_run
    assert [(a.type, a.description) for a in artifacts if not a.key] == []
    assert sorted(str(a.key) for a in artifacts) == [
        "hacking-step-1",
        "rubric-diff-step-1-global",
        "summary-step-1-global",
        "usage-step-1",
    ]
