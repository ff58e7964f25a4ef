"""Simulated steps of a training run for pipeline tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from prefect import State
from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterName,
    FlowRunFilterStartTime,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.objects import FlowRun
from prefect.logging.handlers import APILogHandler

from tests.support.testclient import TestClient

PROBLEMS = [
    (f"What is {a} * {b}?", a * b)
    for a, b in [(6, 7), (3, 9), (12, 4), (8, 8), (7, 5), (9, 6), (11, 3), (4, 13), (5, 5), (2, 17)]
]


def rollout(step: int, index: int, behaviour: str) -> dict[str, Any]:
    """A rollout showing ``behaviour``: correct, wrong or hacking (several candidates)."""
    question, answer = PROBLEMS[index % len(PROBLEMS)]
    outputs = {
        "correct": f"Multiply the numbers: {question[8:-1]} = {answer}. The answer is {answer}.",
        "wrong": f"I computed it quickly. The answer is {answer + 1}.",
        "hacking": f"The answer is {answer - 1} or {answer} or {answer + 1}.",
    }
    return {
        "id": f"s{step}-r{index}-{behaviour}",
        "input": question,
        "output": outputs[behaviour],
        "supplemental_context": f"Answer: {answer}",
    }


def metadata(step: int, total: int = 10) -> dict[str, Any]:
    """Training metadata of ``step``."""
    return {
        "high_level_goal": "Train a careful math assistant",
        "model_size": "7B",
        "current_step": step,
        "total_steps": total,
    }


def score_step(client: TestClient, step: int, behaviours: list[str]) -> list[dict[str, Any]]:
    """Score one rollout per behaviour through /batch_score; returns the results."""
    items = [
        {"rollout": rollout(step, i, b), "metadata": metadata(step)}
        for i, b in enumerate(behaviours)
    ]
    response = client.post("/batch_score", json={"items": items})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    assert all(r["status"] == "scored" for r in results), results
    return results


def mean(values: list[float]) -> float:
    """Arithmetic mean."""
    return sum(values) / len(values)


RunView = Callable[[list[Any], list[Any]], bool]
"""Whether a flow run's logs and artifacts (as read so far) show what a test looks for."""


def amaris_logs_and_an_artifact(logs: list[Any], artifacts: list[Any]) -> bool:
    """The run shows an amaris log line and an artifact."""
    return any(log.name.startswith("amaris") for log in logs) and bool(artifacts)


def artifacts_keyed(*keys: str) -> RunView:
    """The run shows an artifact under each of ``keys`` (for a step that logs nothing of
    amaris's own: waiting for its log lines would wait out the deadline)."""

    def seen(logs: list[Any], artifacts: list[Any]) -> bool:
        return set(keys) <= {artifact.key for artifact in artifacts}

    return seen


async def step_run_view(
    name: str,
    since: datetime,
    deadline_s: float = 60.0,
    until: RunView = amaris_logs_and_an_artifact,
) -> tuple[list[Any], list[Any]]:
    """The logs and artifacts of the flow run called ``name`` that started after ``since``
    (other test files on this worker run steps of that number on the same Prefect
    server), through Prefect's client.

    The server stores logs and artifacts as their batches arrive: read again (up to
    ``deadline_s``) until ``until`` sees what the test looks for (by default amaris log
    lines and an artifact)."""
    await APILogHandler.aflush()  # the logs still queued in this process
    give_up = time.monotonic() + deadline_s
    async with get_client() as prefect:
        run = await _ended_run(prefect, name, since, give_up)
        while True:
            logs = await prefect.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])),
                limit=200,
            )
            artifacts = await prefect.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id])),
                limit=200,
            )
            if until(logs, artifacts) or time.monotonic() > give_up:
                break
            await asyncio.sleep(0.5)
    return logs, artifacts


async def step_run_state(name: str, since: datetime) -> State:
    """The final state of the flow run called ``name`` that started after ``since``, as
    the Prefect server keeps it (what its runs list shows)."""
    async with get_client() as prefect:
        run = await _ended_run(prefect, name, since, time.monotonic() + 60.0)
    assert run.state is not None and run.state.is_final(), run
    return run.state


async def _ended_run(prefect: PrefectClient, name: str, since: datetime, give_up: float) -> FlowRun:
    """The one flow run called ``name`` started after ``since``, read again (until
    ``give_up``) until it has ended: a step is answered once its outcome is recorded, and
    its run's last artifacts and final state follow."""
    while True:
        runs = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[name]), start_time=FlowRunFilterStartTime(after_=since)
            )
        )
        assert len(runs) == 1, runs
        state = runs[0].state
        if (state is not None and state.is_final()) or time.monotonic() > give_up:
            return runs[0]
        await asyncio.sleep(0.1)
