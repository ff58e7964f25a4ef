"""The pipeline's loop: step flows run there on one Prefect client pair."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect import flow
from prefect.client.orchestration import get_client

from amaris.steps.launcher import LocalLauncher, StepLauncher
from amaris.steps.outcomes import StepRun
from amaris.steps.runner import FINISH_GRACE_S, PipelineRunner, finish_before_stop
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.pipeline_helpers import score_step
from tests.support.settings import llm_settings
from tests.support.step_runs import scope_outcome


@flow(name="amaris-test-client-ids")
async def client_ids() -> tuple[int, int]:
    return id(get_client()), id(get_client(sync_client=True))


async def nothing() -> None:
    return None


@pytest.fixture
def runner(prefect_harness: None) -> Iterator[PipelineRunner]:
    started = PipelineRunner(on_start=nothing)
    started.start()
    started.ready.result(timeout=60)
    yield started
    started.stop()


def test_every_flow_run_on_the_pipeline_shares_one_prefect_client_pair(
    runner: PipelineRunner,
) -> None:
    first = runner.submit(client_ids()).result(timeout=60)
    second = runner.submit(client_ids()).result(timeout=60)
    assert first == second


def test_the_local_launcher_runs_the_step_flow_on_the_pipeline_loop(
    runner: PipelineRunner,
) -> None:
    ran: list[tuple[int, str]] = []

    async def step_flow(step: int) -> StepRun:
        ran.append((step, threading.current_thread().name))
        return StepRun(step=step, scopes={"global": scope_outcome("published")})

    launcher: StepLauncher = LocalLauncher(runner, step_flow)
    # A new attempt is the same call: the flow reuses what an earlier run finished.
    outcome = launcher.run(4, True).result(timeout=60)
    assert outcome == StepRun(step=4, scopes={"global": scope_outcome("published")})
    assert ran == [(4, "amaris-pipeline")]


def test_a_stopping_pipeline_lets_work_whose_outcome_is_told_finish(prefect_harness: None) -> None:
    ended: list[str] = []

    async def record(what: str, seconds: float) -> None:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            ended.append(f"{what} cancelled")
            raise
        ended.append(what)

    async def told_then_finishing() -> None:
        finish_before_stop(asyncio.create_task(record("short", 0.2)), "a short record")
        finish_before_stop(asyncio.create_task(record("long", 60.0)), "a long record")

    runner = PipelineRunner(on_start=nothing)
    runner.start()
    runner.ready.result(timeout=60)
    runner.submit(told_then_finishing()).result(timeout=60)
    runner.stop(timeout=FINISH_GRACE_S + 30.0)
    # The short one ends within the grace; the long one is cancelled at its end.
    assert ended == ["short", "long cancelled"]


def test_a_failing_start_up_is_reported_through_ready(prefect_harness: None) -> None:
    async def broken() -> None:
        raise RuntimeError("no Prefect here")

    failed = PipelineRunner(on_start=broken)
    failed.start()
    try:
        with pytest.raises(RuntimeError, match="no Prefect here"):
            failed.ready.result(timeout=60)
    finally:
        failed.stop()


@pytest.mark.usefixtures("prefect_harness")
def test_a_stopped_service_leaves_no_judge_session_open_on_the_pipeline_loop(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    settings = llm_settings(tmp_path, fake_llm, **{"pipeline.rollouts_per_step": None})
    with serve(settings) as client:
        score_step(client, 1, ["correct"] * 4)
        assert client.post("/complete", json={"step": 1}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
        assert done["status"] in ("updated", "unchanged"), done
    pipeline_calls = [r for r in fake_llm.requests if "analy" in str(r.get("messages", ""))]
    assert pipeline_calls  # the step's agents asked the judge from the pipeline loop
    # An aiohttp session collected open warns and reports to its loop's exception handler.
    with (
        caplog.at_level(logging.ERROR, logger="asyncio"),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        gc.collect()
    assert [str(w.message) for w in caught if "Unclosed" in str(w.message)] == []
    assert [r.getMessage() for r in caplog.records if "Unclosed" in r.getMessage()] == []
