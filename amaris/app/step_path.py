"""The step path, built for :func:`amaris.app.wiring.build_services`: the pipeline loop, the
launcher that runs steps (the flow here, or deployment runs with several replicas) and
the coordinator that starts them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from prefect.client.orchestration import get_client

from amaris.app.retention import PrefectRetention
from amaris.app.step_executor import DeploymentExecutor, DeploymentLauncher
from amaris.app.stores import Stores, replica_name, replicated
from amaris.llm.gateway import LLMGateway
from amaris.manifest import ManifestJSON
from amaris.memory.retention import enforce_retention
from amaris.services import settle_heap
from amaris.settings import Settings
from amaris.steps.context import PipelineContext, set_context, store_namespace
from amaris.steps.coordinator import StepCoordinator
from amaris.steps.launcher import LocalLauncher, StepLauncher
from amaris.steps.runner import PipelineRunner
from amaris.steps.store import InProcess, SharedStore
from flows.step_pipeline import run_step_flow


@dataclass(frozen=True)
class StepPathStart:
    """What the step path does as its loop starts (see
    :func:`amaris.app.wiring.build_services`)."""

    manifest: ManifestJSON | None = None
    warm_prefect: bool = False
    prefect_ready: Callable[[], None] | None = None


@dataclass(frozen=True)
class StepPath:
    """The step path: the loop its flows run on, the coordinator, the flows' context (which
    holds the counters ``/metrics`` reads of the step flows run here)."""

    runner: PipelineRunner
    coordinator: StepCoordinator
    context: PipelineContext


def build_step_path(
    settings: Settings,
    stores: Stores,
    gateway: LLMGateway,
    prompts: dict[str, str],
    start: StepPathStart,
    on_finished: Callable[[str, float], None],
) -> StepPath:
    """The pipeline loop, the launcher that runs steps (here, or as deployment runs with
    several replicas) and the coordinator; ``on_finished``: the metrics' record of a run."""
    context = PipelineContext(
        settings=settings,
        gateway=gateway,
        memory=stores.memory,
        rollouts=stores.rollouts,
        steps=stores.steps,
        rubrics=stores.rubrics,
        prompts=prompts,
        namespace=store_namespace(settings),
        manifest=start.manifest,
        precheck_rules=stores.precheck_rules,
    )
    # One replica or several: which collaborators run steps and hold their state is the only
    # difference (configuration), not a second path through the coordinator.
    shared = replicated(settings)
    executor = (
        DeploymentExecutor(
            stores.steps, replica_name(settings), work_pool=settings.pipeline.work_pool
        )
        if shared
        else None
    )
    runner = PipelineRunner(
        on_start=_on_start(settings, stores, context, executor, start), on_stop=gateway.close
    )
    launcher: StepLauncher = (
        DeploymentLauncher(runner, executor)
        if executor is not None
        else LocalLauncher(runner, run_step_flow)
    )

    async def after_step(step: int) -> None:
        await asyncio.to_thread(enforce_retention, settings, stores.rollouts, stores.memory, step)

    coordinator = StepCoordinator(
        settings,
        stores.rollouts,
        stores.steps,
        launcher,
        on_done=after_step,
        on_finished=on_finished,
        store=SharedStore(stores.steps, stores.rollouts) if shared else InProcess(),
        replica=replica_name(settings),
        after_wake=settle_heap,
    )
    return StepPath(runner, coordinator, context)


def _on_start(
    settings: Settings,
    stores: Stores,
    context: PipelineContext,
    executor: DeploymentExecutor | None,
    start: StepPathStart,
) -> Callable[[], Coroutine[Any, Any, None]]:
    """What the pipeline loop runs first: the flows' context, Prefect reached, the step
    deployment served (several replicas) and Prefect's retention."""
    retention = PrefectRetention(settings.prefect, stores.steps)

    async def start_pipeline() -> None:
        set_context(context)
        if start.prefect_ready is not None:
            await asyncio.to_thread(start.prefect_ready)
        if start.warm_prefect:
            # Boot (or reach) the Prefect API now rather than at the first step.
            async with get_client() as client:
                await client.api_healthcheck()
        if executor is not None:
            await executor.start()
        # On the pipeline's loop: it has the Prefect settings the flows run under.
        retention.start()

    return start_pipeline
