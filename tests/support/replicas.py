"""Replicas of amaris in one process sharing Qdrant, and an in-process worker of their pool."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient

from amaris.app.wiring import build_services, create_app
from flows.step_pipeline import step_pipeline
from tests.support.settings import make_settings
from tests.support.testclient import TestClient


class PoolWorker:
    """The worker of a work pool, in this process: runs the pool's scheduled flow runs one
    by one with Prefect's engine (as a process worker's job would), and lists them."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.executed: list[Any] = []
        self._stop = threading.Event()
        context = contextvars.copy_context()  # the session's Prefect test settings
        self._thread = threading.Thread(target=context.run, args=(self._main,), daemon=True)

    def __enter__(self) -> PoolWorker:
        asyncio.run(create_pool(self.pool))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import (
            FlowRunFilter,
            FlowRunFilterState,
            FlowRunFilterStateType,
            WorkPoolFilter,
            WorkPoolFilterName,
        )
        from prefect.client.schemas.objects import StateType
        from prefect.flow_engine import run_flow_async

        pool = WorkPoolFilter(name=WorkPoolFilterName(any_=[self.pool]))
        scheduled = FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
        )
        while not self._stop.is_set():
            async with get_client() as client:
                runs = await client.read_flow_runs(work_pool_filter=pool, flow_run_filter=scheduled)
            for run in runs:
                self.executed.append(run.id)
                await run_flow_async(
                    step_pipeline, flow_run=run, parameters=run.parameters, return_type="state"
                )
            await asyncio.sleep(0.2)  # the worker's poll interval


async def create_pool(pool: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    async with get_client() as client:
        await client.create_work_pool(WorkPoolCreate(name=pool, type="process"), overwrite=True)


def replica_settings(tmp_path: Path, name: str, **overrides: Any) -> Any:
    return make_settings(
        tmp_path,
        **{
            "pipeline.executor": "deployment",
            "server.replica_id": name,
            "pipeline.work_pool": f"pool-{tmp_path.name}"[:60],
            "memory.collection": f"scale_{tmp_path.name}"[:60],
            **overrides,
        },
    )


@contextmanager
def replicas(
    tmp_path: Path, names: list[str], **overrides: Any
) -> Iterator[tuple[list[TestClient], PoolWorker]]:
    shared = QdrantClient(location=":memory:")
    with ExitStack() as stack:
        pool = replica_settings(tmp_path, "r", **overrides).pipeline.work_pool
        assert pool is not None
        worker = stack.enter_context(PoolWorker(pool))  # the pool exists before the replicas
        clients = []
        for name in names:
            settings = replica_settings(tmp_path, name, **overrides)
            services = build_services(settings, qdrant=shared)
            clients.append(stack.enter_context(TestClient(create_app(settings, services=services))))
        yield clients, worker
    shared.close()
