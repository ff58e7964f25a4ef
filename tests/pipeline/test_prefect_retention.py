"""Prefect's store stays bounded: the runs of old done steps leave Prefect's database with
their task runs and logs (their artifacts and old events: the vacuum of the Prefect server
amaris starts, as it configures it), and their LLM tasks' result files leave the result
folder; recent steps, and a failed step awaiting repair (its runs and the results its
re-run reuses), stay; null ``keep_steps`` and ``retention_hours`` turn it off.

Real Prefect flows on the session's Prefect test server; the judge is the fake LLM with the
offline judge's replies (tests/support/fake_llm.py)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterName,
    FlowRunFilterStartTime,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.settings import get_current_settings
from prefect.states import Cancelled, Running

from amaris.app import retention
from amaris.app.prefect_env import configure_prefect, retention_env
from amaris.app.retention import (
    PrefectRetention,
    Pruned,
    is_result_file,
    plan,
    remove_results,
    step_of,
)
from amaris.services import Services
from amaris.settings import Settings
from amaris.sim.judge_server import Reply
from amaris.steps.retry import digest
from flows.step_pipeline import step_pipeline
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_helpers import score_step
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

BEHAVIOURS = ["correct", "wrong", "hacking", "correct"]
NEVER = 3600.0
"""An interval the service's own pass never reaches in a test: the test prunes itself."""


def agent_of(body: dict[str, Any]) -> str:
    """The agent a chat request is for: its data block's header names it."""
    for message in reversed(body["messages"]):
        content = str(message["content"])
        if "<<<AMARIS_DATA\n" in content:
            header = content.split("<<<AMARIS_DATA\n", 1)[1].split("\n", 1)[0]
            return str(json.loads(header)["agent"])
    return ""


def summarizer_down(body: dict[str, Any]) -> Reply:
    """The offline judge, except a 503 for the summarizer: the step fails after its
    analyses are persisted (the results its repair reuses)."""
    return Reply(status=503) if agent_of(body) == "summarizer" else offline_reply(body)


def results_folder() -> Path:
    return Path(get_current_settings().results.local_storage_path)


def result_files() -> set[str]:
    folder = results_folder()
    return set(os.listdir(folder)) if folder.is_dir() else set()


@dataclass
class Ran:
    """The steps a test ran: each one's outcome, and the result files it wrote."""

    since: datetime
    status: dict[int, str] = field(default_factory=dict)
    files: dict[int, set[str]] = field(default_factory=dict)


@pytest.fixture
def run_steps(
    fake_llm: FakeLLM,
) -> Iterator[Callable[[TestClient, list[int], set[int]], Ran]]:
    """Run ``steps`` one after the other through the pipeline (those in ``failing`` with the
    summarizer down, so they stay failed), noting the result files each one wrote."""

    def run(client: TestClient, steps: list[int], failing: set[int]) -> Ran:
        ran = Ran(since=datetime.now(UTC))
        for step in steps:
            before = result_files()
            score_step(client, step, BEHAVIOURS)
            fake_llm.default = summarizer_down if step in failing else offline_reply
            assert client.post("/complete", json={"step": step}).status_code == 200
            done = client.get("/rubric_status/wait", params={"step": step, "timeout": 120})
            ran.status[step] = done.json()["status"]
            ran.files[step] = result_files() - before
            fake_llm.default = offline_reply
        return ran

    try:
        yield run
    finally:
        fake_llm.default = offline_reply


def with_prefect(settings: Settings, **fields: Any) -> Settings:
    """``settings`` with these ``prefect`` fields (null ones too: a null override of
    ``make_settings`` leaves the default)."""
    return settings.model_copy(update={"prefect": settings.prefect.model_copy(update=fields)})


def settings_of(tmp_path: Path, fake: FakeLLM, **prefect: Any) -> Settings:
    settings = llm_settings(
        tmp_path,
        fake,
        **{
            "pipeline.rollouts_per_step": None,
            "pipeline.task_retries": 0,
            "pipeline.task_retry_delays_seconds": [0.0],
        },
    )
    return with_prefect(settings, retention_interval_seconds=NEVER, **prefect)


async def step_runs(names: list[str], since: datetime) -> dict[str, list[FlowRun]]:
    """The flow runs named ``names`` started after ``since`` (other test files on this worker
    run steps of their own on the same Prefect server)."""
    async with get_client() as prefect:
        runs = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=names), start_time=FlowRunFilterStartTime(after_=since)
            )
        )
    found: dict[str, list[FlowRun]] = {name: [] for name in names}
    for run in runs:
        found[str(run.name)].append(run)
    return found


async def task_runs_of(run_ids: list[UUID]) -> int:
    """How many task runs the runs ``run_ids`` have."""
    async with get_client() as prefect:
        task_runs = await prefect.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=run_ids))
        )
    return len(task_runs)


async def logs_gone(run_ids: list[UUID], deadline_s: float = 60.0) -> bool:
    """Whether the runs' logs are gone (the server deletes them after the run, in the
    background): read again until they are, up to ``deadline_s``."""
    give_up = time.monotonic() + deadline_s
    async with get_client() as prefect:
        while True:
            logs = await prefect.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=run_ids))
            )
            if not logs or time.monotonic() > give_up:
                return not logs
            await asyncio.sleep(0.5)


def prune(client: TestClient, settings: Any) -> Pruned:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return asyncio.run(PrefectRetention(settings.prefect, services.steps).prune())


@pytest.mark.usefixtures("prefect_harness")
def test_old_done_steps_go_with_their_results_recent_and_failed_ones_stay(
    tmp_path: Path, fake_llm: FakeLLM, run_steps: Callable[[TestClient, list[int], set[int]], Ran]
) -> None:
    settings = settings_of(tmp_path, fake_llm, keep_steps=2, retention_hours=None)
    steps, failed = [700, 701, 702, 703, 704], 701
    names = [f"step-{step}" for step in steps]
    with serve(settings) as client:
        ran = run_steps(client, steps, {failed})
        assert ran.status[failed] == "failed" and ran.status[700] != "failed", ran.status
        assert all(ran.files[step] for step in steps), ran.files  # each step wrote results
        before = asyncio.run(step_runs(names, ran.since))
        assert all(len(before[name]) == 1 for name in names), before
        pruned = prune(client, settings)
    after = asyncio.run(step_runs(names, ran.since))
    old = [700, 702]  # done, and older than the newest two steps (703, 704)
    assert pruned.runs >= len(old) and pruned.files >= 1, pruned
    assert [name for name in names if not after[name]] == [f"step-{step}" for step in old]
    gone = [before[f"step-{step}"][0].id for step in old]
    assert asyncio.run(task_runs_of(gone)) == 0
    assert asyncio.run(logs_gone(gone))
    files = result_files()
    assert not any(ran.files[step] & files for step in old)
    # the failed step awaiting repair keeps its run and the results its re-run reuses
    assert ran.files[failed] <= files
    assert ran.files[703] | ran.files[704] <= files
    kept = [before[f"step-{step}"][0].id for step in (failed, 703, 704)]
    assert asyncio.run(task_runs_of(kept)) > 0


@pytest.mark.usefixtures("prefect_harness")
def test_null_keep_steps_and_retention_hours_remove_nothing(
    tmp_path: Path, fake_llm: FakeLLM, run_steps: Callable[[TestClient, list[int], set[int]], Ran]
) -> None:
    off = settings_of(tmp_path, fake_llm, keep_steps=None, retention_hours=None)
    assert not off.prefect.retention_on and retention_env(off) == {}
    steps = [710, 711, 712]
    names = [f"step-{step}" for step in steps]
    with serve(off) as client:
        ran = run_steps(client, steps, set())
        assert prune(client, off) == Pruned()
        assert all(runs for runs in asyncio.run(step_runs(names, ran.since)).values())
        assert set().union(*ran.files.values()) <= result_files()
        # the same store with a bound: the oldest step goes
        assert prune(client, with_prefect(off, keep_steps=2)).runs >= 1
    after = asyncio.run(step_runs(names, ran.since))
    assert [name for name in names if not after[name]] == ["step-710"]
    assert not ran.files[710] & result_files()


@pytest.mark.usefixtures("prefect_harness")
def test_the_service_prunes_every_interval(
    tmp_path: Path, fake_llm: FakeLLM, run_steps: Callable[[TestClient, list[int], set[int]], Ran]
) -> None:
    settings = settings_of(tmp_path, fake_llm, keep_steps=1, retention_hours=None)
    settings = with_prefect(settings, retention_interval_seconds=0.5)
    with serve(settings) as client:
        ran = run_steps(client, [720, 721], set())
        give_up = time.monotonic() + 60
        while asyncio.run(step_runs(["step-720"], ran.since))["step-720"]:
            assert time.monotonic() < give_up, "step 720's run was never removed"
            time.sleep(0.5)
        assert asyncio.run(step_runs(["step-721"], ran.since))["step-721"]


def test_prefects_server_vacuums_old_events_and_the_deleted_runs_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = (
        "PREFECT_SERVER_EVENTS_RETENTION_PERIOD",
        "PREFECT_SERVER_SERVICES_DB_VACUUM_ENABLED",
        "PREFECT_SERVER_SERVICES_DB_VACUUM_LOOP_SECONDS",
        "PREFECT_SERVER_SERVICES_DB_VACUUM_ORPHAN_CLEANUP_LOOP_SECONDS",
    )
    for name in names:
        monkeypatch.delenv(name, raising=False)
    configure_prefect(make_settings(tmp_path, **{"prefect.retention_hours": 2}))
    assert [os.environ.get(name) for name in names] == ["PT7200S", "events,orphans", "600", "600"]
    for name in names:
        monkeypatch.delenv(name)
    configure_prefect(with_prefect(make_settings(tmp_path), keep_steps=5, retention_hours=None))
    assert [os.environ.get(name) for name in names] == [None, "events,orphans", "600", "600"]


def _run(name: str, state: StateType, created: datetime, **fields: Any) -> FlowRun:
    return FlowRun(
        name=name,
        flow_id=uuid4(),
        state_type=state,
        created=created,
        end_time=None if state == StateType.RUNNING else created + timedelta(minutes=1),
        **fields,
    )


def test_the_plan_keeps_what_a_running_or_failed_step_needs(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    hour = timedelta(hours=1)
    statuses = {1: "done", 2: "failed", 3: "done", 4: "completing", 5: "done", 9: "open"}
    runs = {
        step: _run(
            f"step-{step}",
            StateType.RUNNING if step == 4 else StateType.COMPLETED,
            now - (10 - step) * hour,
            parameters={"step": step},
        )
        for step in (1, 2, 3, 4, 5)
    }
    stale = _run("step-3", StateType.RUNNING, now - 9 * hour)
    repairs = [_run("repair", StateType.COMPLETED, now - k * hour) for k in range(4)]
    settings = with_prefect(make_settings(tmp_path), keep_steps=2, retention_hours=None).prefect
    chosen = plan([*runs.values(), stale], repairs, statuses, settings, now)
    # the newest step that ran is 5 (step 9 is only open): steps 4 and 5 are the newest two
    assert {r.name for r in chosen.remove if r.name != "repair"} == {"step-1", "step-3"}
    assert stale not in chosen.remove  # a run not finished stays, whatever its step
    assert chosen.spare == [runs[2]]
    assert chosen.cutoff == runs[4].created  # the running step's run is the oldest kept
    assert [r for r in chosen.remove if r.name == "repair"] == repairs[2:]
    aged = with_prefect(make_settings(tmp_path), keep_steps=None, retention_hours=5.5).prefect
    chosen = plan(list(runs.values()), repairs, statuses, aged, now)
    assert {r.name for r in chosen.remove} == {"step-1", "step-3"}  # ended over 5.5 h ago
    off = with_prefect(make_settings(tmp_path), keep_steps=None, retention_hours=None).prefect
    assert plan(list(runs.values()), repairs, statuses, off, now).remove == []


def test_only_the_llm_tasks_result_files_are_removed(tmp_path: Path) -> None:
    old = datetime.now(UTC) - timedelta(days=1)
    names = [f"analyzer-{digest('a')}", f"updater-{digest('b')}", "notes.txt", f"x-{digest('c')}"]
    for name in names:
        (tmp_path / name).write_text("result")
        os.utime(tmp_path / name, (old.timestamp(), old.timestamp()))
    fresh = f"summarizer-{digest('d')}"
    (tmp_path / fresh).write_text("result")
    removed = remove_results(tmp_path, datetime.now(UTC) - timedelta(hours=1), {names[1]})
    assert removed == (1, len("result"))
    assert sorted(os.listdir(tmp_path)) == sorted([*names[1:], fresh])


@pytest.mark.usefixtures("prefect_harness")
def test_a_run_prefect_never_saw_end_gets_its_steps_final_state(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "LEFT_RUNNING_S", 0.0)
    # retention off: the pass still ends the runs left unfinished
    settings = settings_of(tmp_path, fake_llm, keep_steps=None, retention_hours=None)
    outcomes = {740: "failed", 741: "done", 742: "completing"}

    async def running_runs() -> dict[int, UUID]:
        async with get_client() as prefect:
            made = {
                step: await prefect.create_flow_run(
                    step_pipeline, name=f"step-{step}", parameters={"step": step}, state=Running()
                )
                for step in outcomes
            }
        return {step: run.id for step, run in made.items()}

    async def states(ids: dict[int, UUID]) -> dict[int, str]:
        async with get_client() as prefect:
            runs = {step: await prefect.read_flow_run(i) for step, i in ids.items()}
        return {
            step: str(run.state_type.value if run.state_type else None)
            for step, run in runs.items()
        }

    with serve(settings) as client:
        services: Services = client.app.state.services  # type: ignore[attr-defined]
        for step, status in outcomes.items():
            services.steps.set(step, status=status)
        ids = asyncio.run(running_runs())
        assert prune(client, settings).ended == 2
    assert asyncio.run(states(ids)) == {740: "FAILED", 741: "COMPLETED", 742: "RUNNING"}
    asyncio.run(cancel(ids[742]))  # the test server is shared: leave no run running


async def cancel(run_id: UUID) -> None:
    async with get_client() as prefect:
        await prefect.set_flow_run_state(run_id, Cancelled(), force=True)


def test_names_are_read_without_a_regex_and_bounded() -> None:
    assert is_result_file("analyzer-" + "a" * 64)
    assert not is_result_file("analyzer-" + "A" * 64)
    assert not is_result_file("stranger-" + "a" * 64)
    assert not is_result_file("analyzer-" * 12_000)
    assert not is_result_file("-" * 100_000)
    assert step_of(_run("step-12", StateType.COMPLETED, datetime.now(UTC))) == 12
    for name in ("step-" + "9" * 100_000, "step-1e3", "step-\u0663", "step-"):
        assert step_of(_run(name, StateType.COMPLETED, datetime.now(UTC))) is None
