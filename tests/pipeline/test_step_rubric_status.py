"""A finished step says what it did to the rubric, in every surface: ``/rubric_status/wait``
and ``RewardClient`` (``updated``, ``unchanged`` or ``rejected``, each scope's outcome and
reason), ``GET /steps`` and ``GET /steps/{n}``, and the step's Prefect flow run (its state's
name and message, as the runs list shows them).

Real Prefect flow over a real HTTP server, real Qdrant; the LLM faked at the gateway seam
(tests/support/fake_llm.py): every agent answers as the offline judge, except a scripted
updater where a test needs one.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prefect import State
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterName,
    FlowRunFilterStartTime,
)
from prefect.client.schemas.objects import StateType
from prefect.exceptions import MissingResult

from amaris import RewardClient
from amaris.client import WaitAnswer
from amaris.sim.judge_server import Reply
from flows import step_pipeline as step_flow_module
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.pipeline_canary import agent_of
from tests.support.pipeline_helpers import metadata, rollout, step_run_state
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

pytestmark = pytest.mark.usefixtures("prefect_harness")

DEADLINE_S = 120.0
"""Generous bound of each wait for the step (never part of an assertion)."""
CLEAN = ["correct"] * 4 + ["wrong"] * 2
HACKED = ["correct"] * 4 + ["hacking"] * 4
RETIRE_ANCHOR = {
    "update_strategy": "CORRECTIVE",
    "rubric_modifications": [{"action": "retire", "criterion_id": "A1"}],
}
"""A proposal the guardrails refuse: anchors are immutable."""
NOTHING = {"update_strategy": "MAINTENANCE", "rubric_modifications": []}
"""A valid proposal that changes nothing."""


def updater_proposing(proposal: dict[str, Any]) -> Callable[[dict[str, Any]], Reply]:
    """The offline judge, except an updater that proposes ``proposal``."""

    def respond(body: dict[str, Any]) -> Reply:
        if agent_of(body) == "updater":
            return Reply(content=json.dumps(proposal))
        return offline_reply(body)

    return respond


@dataclass(frozen=True)
class Surfaces:
    """Everything that tells a finished step's outcome."""

    answer: WaitAnswer
    """``RewardClient.rubric_updated``'s."""
    answer_async: WaitAnswer
    """``RewardClient.rubric_updated_async``'s."""
    waited: dict[str, Any]
    """``GET /rubric_status/wait``'s JSON."""
    listed: list[dict[str, Any]]
    """``GET /steps``."""
    detail: dict[str, Any]
    """``GET /steps/{n}``."""
    run: State
    """The step's Prefect flow run's state, read back from the server."""


async def _wait_async(url: str, step: int) -> WaitAnswer:
    async with RewardClient(url) as client:
        return await client.rubric_updated_async(step, timeout=DEADLINE_S)


def run_step(
    tmp_path: Path,
    fake_llm: FakeLLM,
    step: int,
    behaviours: list[str],
    respond: Callable[[dict[str, Any]], Reply] = offline_reply,
) -> Surfaces:
    """Score one rollout per behaviour as ``step`` over HTTP, complete the step and read
    its outcome from each surface (none of them may raise for a refused update)."""
    settings = llm_settings(tmp_path, fake_llm, **{"pipeline.rollouts_per_step": None})
    fake_llm.default = respond
    since = datetime.now(UTC)
    with (
        serve_in_thread(in_memory_app(settings)) as url,
        httpx.Client(base_url=url, timeout=DEADLINE_S) as http,
    ):
        items = [
            {"rollout": rollout(step, i, b), "metadata": metadata(step)}
            for i, b in enumerate(behaviours)
        ]
        scored = http.post("/batch_score", json={"items": items})
        assert scored.status_code == 200, scored.text
        client = RewardClient(url)
        assert client.rollouts_complete(step) == "complete"
        answer = client.rubric_updated(step, timeout=DEADLINE_S)
        answer_async = asyncio.run(_wait_async(url, step))
        waited = http.get("/rubric_status/wait", params={"step": step, "timeout": 1}).json()
        listed = http.get("/steps").json()
        detail = http.get(f"/steps/{step}").json()
    run = asyncio.run(step_run_state(f"step-{step}", since))
    return Surfaces(answer, answer_async, waited, listed, detail, run)


def test_a_refused_update_is_rejected_in_every_surface(tmp_path: Path, fake_llm: FakeLLM) -> None:
    seen = run_step(tmp_path, fake_llm, 91, HACKED, updater_proposing(RETIRE_ANCHOR))
    scope = seen.waited["scopes"]["global"]
    assert seen.waited["status"] == "rejected", seen.waited
    assert scope["outcome"] == "rejected"
    assert "anchor A1 is immutable" in scope["reason"], scope
    assert scope["version"] == scope["base_version"] == 1
    # The client returns the answer as its model (it raises for a failed run only).
    assert seen.answer == seen.answer_async
    assert seen.answer.model_dump(mode="json") == seen.waited
    assert [s for s in seen.listed if s["step"] == 91] == [
        {"step": 91, "status": "done", "rubric": "rejected"}
    ]
    assert (seen.detail["status"], seen.detail["rubric"]) == ("done", "rejected")
    assert seen.detail["scopes"]["global"]["outcome"] == "rejected"
    assert seen.detail["scopes"]["global"]["reason"] == scope["reason"]
    # The runs list shows the refusal: a Completed run named for it, its reason given.
    assert (seen.run.type, seen.run.name) == (StateType.COMPLETED, "Rejected")
    assert seen.run.message is not None
    assert seen.run.message.startswith("step 91: 1 rejected; global rejected: ")
    assert "anchor A1 is immutable" in seen.run.message


def test_a_proposal_that_changes_nothing_is_unchanged_in_every_surface(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    seen = run_step(tmp_path, fake_llm, 92, CLEAN, updater_proposing(NOTHING))
    scope = seen.waited["scopes"]["global"]
    assert seen.waited["status"] == "unchanged", seen.waited
    assert (scope["outcome"], scope["reason"], scope["strategy"]) == (
        "unchanged",
        None,
        "MAINTENANCE",
    )
    assert seen.answer == seen.answer_async
    assert seen.answer.model_dump(mode="json") == seen.waited
    assert [s for s in seen.listed if s["step"] == 92] == [
        {"step": 92, "status": "done", "rubric": "unchanged"}
    ]
    assert (seen.detail["rubric"], seen.detail["scopes"]["global"]["outcome"]) == (
        "unchanged",
        "unchanged",
    )
    assert (seen.run.type, seen.run.name, seen.run.message) == (
        StateType.COMPLETED,
        "Unchanged",
        "step 92: 1 unchanged",
    )


def test_a_published_version_is_updated_in_every_surface(tmp_path: Path, fake_llm: FakeLLM) -> None:
    seen = run_step(tmp_path, fake_llm, 93, HACKED)
    scope = seen.waited["scopes"]["global"]
    assert seen.waited["status"] == "updated", seen.waited
    assert (scope["outcome"], scope["reason"]) == ("published", None)
    assert scope["version"] == scope["base_version"] + 1
    assert seen.answer == seen.answer_async
    assert seen.answer.model_dump(mode="json") == seen.waited
    assert [s for s in seen.listed if s["step"] == 93] == [
        {"step": 93, "status": "done", "rubric": "updated"}
    ]
    assert seen.detail["rubric"] == "updated"
    assert seen.detail["scopes"]["global"]["version"] == scope["version"]
    assert (seen.run.type, seen.run.name, seen.run.message) == (
        StateType.COMPLETED,
        "Updated",
        "step 93: 1 published",
    )


def complete_clean_step(client: TestClient) -> None:
    """Step 0's rollouts (:data:`CLEAN`) scored, then the step completed."""
    items = [{"rollout": rollout(0, i, b), "metadata": metadata(0)} for i, b in enumerate(CLEAN)]
    assert client.post("/batch_score", json={"items": items}).status_code == 200
    assert client.post("/complete", json={"step": 0}).json() == {"status": "complete"}


def test_a_completed_run_whose_result_prefect_lost_is_told_from_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Prefect's server may answer a retried final-state write with the state it stored,
    # without the data: the caller's result is then MissingResult, though the run ended well.
    the_flow = step_flow_module.step_pipeline

    async def result_lost(step: int) -> Any:
        await the_flow(step)
        raise MissingResult("State data is missing.")

    monkeypatch.setattr(step_flow_module, "step_pipeline", result_lost)
    settings = make_settings(tmp_path, **{"pipeline.rollouts_per_step": None})
    with TestClient(in_memory_app(settings)) as client:
        complete_clean_step(client)
        done = client.get("/rubric_status/wait", params={"step": 0, "timeout": DEADLINE_S}).json()
        record = client.get("/steps/0").json()
    assert done["status"] in ("updated", "unchanged"), done
    assert done["scopes"]["global"]["rollouts"] == len(CLEAN)
    assert record["status"] == "done"
    assert "outcome is read from the step registry" in caplog.text


async def _run_state(name: str, since: datetime) -> State:
    """The state the flow run called ``name`` (started after ``since``) has now."""
    async with get_client() as prefect:
        [run] = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[name]), start_time=FlowRunFilterStartTime(after_=since)
            )
        )
    assert run.state is not None
    return run.state


def test_the_wait_answers_once_the_outcome_is_recorded_not_after_the_runs_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run's last artifacts are Prefect's record of it: a trainer waiting on the rubric
    # is not held by them (here held until the test has its answer).
    release = threading.Event()
    write_usage = step_flow_module.usage_artifact

    async def held(step: int, rollouts: int | None, failed: bool = False) -> None:
        await asyncio.to_thread(release.wait, 2 * DEADLINE_S)  # past the wait's own bound
        await write_usage(step, rollouts, failed)

    monkeypatch.setattr(step_flow_module, "usage_artifact", held)
    settings = make_settings(tmp_path, **{"pipeline.rollouts_per_step": None})
    since = datetime.now(UTC)
    with TestClient(in_memory_app(settings)) as client:
        complete_clean_step(client)
        try:
            waited = {"step": 0, "timeout": DEADLINE_S}
            done = client.get("/rubric_status/wait", params=waited).json()
            meanwhile = asyncio.run(_run_state("step-0", since))
        finally:
            release.set()
        final = asyncio.run(step_run_state("step-0", since))
    assert done["status"] in ("updated", "unchanged"), done
    assert done["scopes"]["global"]["rollouts"] == len(CLEAN)
    assert meanwhile.is_running()
    assert final.is_completed()


def test_a_record_of_the_run_that_cannot_be_written_does_not_undo_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def refused(step: int, rollouts: int | None, failed: bool = False) -> None:
        raise httpx.ConnectError("Prefect's server is gone")

    monkeypatch.setattr(step_flow_module, "usage_artifact", refused)
    settings = make_settings(tmp_path, **{"pipeline.rollouts_per_step": None})
    since = datetime.now(UTC)
    with TestClient(in_memory_app(settings)) as client:
        complete_clean_step(client)
        done = client.get("/rubric_status/wait", params={"step": 0, "timeout": DEADLINE_S}).json()
        final = asyncio.run(step_run_state("step-0", since))
        record = client.get("/steps/0").json()
    assert done["status"] in ("updated", "unchanged"), done
    assert record["status"] == "done"
    assert final.is_completed()
    assert "an artifact of its run was not written: Prefect's server is gone" in caplog.text
