"""Several replicas of one store (``pipeline.executor: deployment``): no correctness
depends on one process's memory.

Two amaris apps share one Qdrant store (one client in this process: the machine has no
Qdrant server binary) and the session's Prefect server. Rollouts of a step arrive at
both; the step completes once their sum reaches ``rollouts_per_step``, runs once as a
deployment run, and both replicas see it done.

Prefect executes a deployment run in a process of its own (a runner's subprocess, a
worker's job), which cannot reach the one in-process store: so the replicas here put the
deployment on a work pool, and :class:`PoolWorker` stands in for the pool's worker process,
executing its scheduled runs in this process with Prefect's engine.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.app.step_executor import DeploymentExecutor
from amaris.app.wiring import build_services, create_app
from amaris.memory.models import StepRecord
from amaris.memory.rollout_log import StepRegistry
from flows.step_pipeline import step_pipeline
from tests.support.pipeline_helpers import metadata, rollout
from tests.support.replicas import PoolWorker, create_pool, replica_settings, replicas
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

pytestmark = pytest.mark.usefixtures("prefect_harness")


def score(client: TestClient, step: int, index: int, behaviour: str = "correct") -> None:
    body = {"rollout": rollout(step, index, behaviour), "metadata": metadata(step)}
    response = client.post("/score", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "scored"


async def step_runs(step: int) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    async with get_client() as client:
        deployment = await client.read_deployment_by_name("amaris-step/steps")
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[f"step-{step}"]))
        )
    return [r for r in runs if r.deployment_id == deployment.id and r.parameters == {"step": step}]


async def running_run(step: int) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    async with get_client() as client:
        deployment = await client.read_deployment_by_name("amaris-step/steps")
        await client.create_flow_run_from_deployment(
            deployment.id,
            parameters={"step": step},
            name=f"step-{step}",
            idempotency_key=f"step-{step}-0",
            state=Running(),
        )


def test_step_counted_across_replicas_runs_once(tmp_path: Path) -> None:
    step = 9001  # a step number no other test of the session's Prefect server uses
    with replicas(tmp_path, ["r1", "r2"], **{"pipeline.rollouts_per_step": 6}) as ((a, b), worker):
        for i in range(3):  # neither replica alone reaches 6
            score(a, step, 2 * i)
            score(b, step, 2 * i + 1)
        for client in (b, a):
            done = client.get("/rubric_status/wait", params={"step": step, "timeout": 120}).json()
            assert done["status"] == "unchanged", done
            assert done["scopes"]["global"]["rollouts"] == 6
        services = [c.app.state.services for c in (a, b)]  # type: ignore[attr-defined]
        records = services[0].rollouts.load_step(step)
        assert sorted(r.rollout.id for r in records) == sorted(
            rollout(step, i, "correct")["id"] for i in range(6)
        )
        assert [r.seq for r in records] == list(range(6))
        entry = services[1].steps.get(step)
        assert entry is not None and entry.status == "done" and entry.executor in {"r1", "r2"}
        # a late rollout at the replica that did not execute the step is flagged late
        score(b, step, 6)
        assert services[0].rollouts.count(step) == 7
        late = {r.rollout.id: r.late for r in services[0].rollouts.load_step(step)}
        assert late == {
            **{rollout(step, i, "correct")["id"]: False for i in range(6)},
            rollout(step, 6, "correct")["id"]: True,
        }
    runs = asyncio.run(step_runs(step))
    assert len(runs) == 1 and runs[0].state.is_completed()
    # both replicas submitted the step; one flow run of it was executed, once
    assert worker.executed == [runs[0].id]


def test_manual_complete_at_one_replica_wakes_the_other(tmp_path: Path) -> None:
    step = 9002
    with replicas(tmp_path, ["r1", "r2"]) as ((a, b), worker):
        for i in range(4):
            score(a, step, i)
        assert b.post("/complete", json={"step": step}).json() == {"status": "complete"}
        # a second /complete elsewhere starts nothing new, and says so
        again = a.post("/complete", json={"step": step}).json()
        assert again["status"] == "noop" and again["reason"].startswith(f"step {step} is "), again
        done = a.get("/rubric_status/wait", params={"step": step, "timeout": 120}).json()
        assert done["status"] == "unchanged", done
        assert done["scopes"]["global"]["rollouts"] == 4
        assert b.get("/rubric_status/wait").json()["step"] == step
    runs = asyncio.run(step_runs(step))
    assert len(runs) == 1 and runs[0].state.is_completed()
    assert worker.executed == [runs[0].id]


def test_work_pool_runs_are_left_to_the_pool_workers(tmp_path: Path) -> None:
    from prefect.flow_engine import run_flow_async

    step, pool = 9003, "amaris-test-pool"
    asyncio.run(create_pool(pool))
    settings = replica_settings(tmp_path, "r1", **{"pipeline.work_pool": pool})
    with TestClient(create_app(settings)) as a:
        # the deployment is registered once the pipeline has started (seconds under load)
        a.app.state.services.runner.ready.result(timeout=120)  # type: ignore[attr-defined]
        for i in range(3):
            score(a, step, i)
        assert a.post("/complete", json={"step": step}).json() == {"status": "complete"}
        # the replica submits the run but does not run it: it waits for the pool's workers
        pending = a.get("/rubric_status/wait", params={"step": step, "timeout": 2}).json()
        assert pending["status"] == "pending", pending
        deadline = time.monotonic() + 60
        while not (runs := asyncio.run(step_runs(step))) and time.monotonic() < deadline:
            time.sleep(0.2)
        (run,) = runs
        assert run.work_pool_name == pool and run.state.is_scheduled()
        # be the pool's worker: run the flow run as its process would
        asyncio.run(run_flow_async(step_pipeline, flow_run=run, parameters=run.parameters))
        done = a.get("/rubric_status/wait", params={"step": step, "timeout": 60}).json()
        assert done["status"] == "unchanged", done
        assert done["scopes"]["global"]["rollouts"] == 3


@pytest.mark.slow  # two Python processes importing the server stack
def test_worker_process_builds_its_context_from_amaris_config(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    data = tmp_path / "data"
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(data), "embedding_model": "hashing"},
                "pipeline": {"executor": "deployment"},
                "server": {"replica_id": "w1"},
            }
        )
    )
    settings = make_settings(
        tmp_path, **{"pipeline.executor": "deployment", "server.replica_id": "w1"}
    )
    with TestClient(create_app(settings)) as client:
        for i in range(2):
            score(client, 7, i)
    probe = (
        "from amaris.steps.context import get_context; c = get_context(); "
        "print(c.rollouts.count(7), c.rubrics.current('global').version, c.namespace)"
    )
    env = {**__import__("os").environ, "AMARIS_CONFIG": str(config)}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out[:2] == ["2", "1"] and out[2].endswith("/amaris")
    failed = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in env.items() if k != "AMARIS_CONFIG"},
    )
    assert failed.returncode != 0 and "AMARIS_CONFIG" in failed.stderr


def test_replica_restart_gives_its_interrupted_step_a_new_attempt(tmp_path: Path) -> None:
    step = 9004
    shared = QdrantClient(location=":memory:")

    def app(name: str) -> TestClient:
        settings = replica_settings(tmp_path, name)
        return TestClient(create_app(settings, services=build_services(settings, qdrant=shared)))

    try:
        with PoolWorker(f"pool-{tmp_path.name}"[:60]), app("r1") as first:
            for i in range(3):
                score(first, step, i)
            registry = first.app.state.services.steps  # type: ignore[attr-defined]
            # the step deployment is registered once the pipeline has started
            first.app.state.services.runner.ready.result(timeout=120)  # type: ignore[attr-defined]
        # r1 "was killed" while it ran the step: its run stays Running, the registry
        # names it the executor
        asyncio.run(running_run(step))
        registry.set(step, status="completing", executor="r1")
        with PoolWorker(f"pool-{tmp_path.name}"[:60]), app("r2") as other:
            # another replica only watches a step r1 was running
            pending = other.get("/rubric_status/wait", params={"step": step, "timeout": 2}).json()
            assert pending["status"] == "pending", pending
            with app("r1") as restarted:
                # r1 restarts (same replica_id) and gives the step its next attempt
                done = other.get(
                    "/rubric_status/wait", params={"step": step, "timeout": 120}
                ).json()
                assert done["status"] == "unchanged", done
                assert done["scopes"]["global"]["rollouts"] == 3
                entry = restarted.app.state.services.steps.get(step)  # type: ignore[attr-defined]
                assert entry is not None and entry.attempt == 1 and entry.status == "done"
    finally:
        shared.close()
    runs = {r.idempotency_key: r.state.type.value for r in asyncio.run(step_runs(step))}
    assert runs == {f"step-{step}-0": "RUNNING", f"step-{step}-1": "COMPLETED"}


class _ExecutorRestartsAfterTheFirstRead(StepRegistry):
    """The registry as a watching replica sees it when the step's executor (r1) restarts
    between the watcher's read of the record and what it does next: r1 records its next
    attempt (1) right after that first read; at the next read the step is done, so the
    watcher's follow loop ends."""

    reads = 0

    def get(self, step: int) -> StepRecord | None:
        record = super().get(step)
        self.reads += 1
        if self.reads == 1:
            super().set(step, attempt=1, executor="r1")
        elif self.reads == 2:
            return super().set(step, status="done")
        return record


def test_a_watching_replica_never_writes_back_an_older_attempt(tmp_path: Path) -> None:
    # The race behind the test above's "attempt 0": r2 resumed the step (watching r1's
    # run) and read the record before restarted r1 recorded attempt 1, then wrote its
    # attempt 0 over it.
    step, pool = 9005, f"race-{tmp_path.name}"[:60]
    asyncio.run(create_pool(pool))  # no worker: the runs stay scheduled
    qdrant = QdrantClient(location=":memory:")
    try:
        registry = _ExecutorRestartsAfterTheFirstRead(qdrant, "race")
        registry.set(step, status="completing", executor="r1")
        watcher = DeploymentExecutor(registry, "r2", poll_seconds=0.01, work_pool=pool)

        async def watch() -> None:
            await watcher.start()
            await watcher.run(step)

        asyncio.run(watch())
        record = registry.get(step)
        assert record is not None
        assert (record.attempt, record.executor, record.status) == (1, "r1", "done")
    finally:
        qdrant.close()
