"""Everything a running amaris holds, built once from the settings."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qdrant_client import QdrantClient

from amaris.llm.budget import ContextWindows
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, build_providers
from amaris.llm.output_mode import OutputModes
from amaris.llm.providers import ChatProvider
from amaris.memory.embedder import Embedder, build_embedder
from amaris.memory.rollout_log import RolloutLog, StepRegistry
from amaris.memory.store import MemoryStore
from amaris.metrics import Metrics
from amaris.models import ScoreRequest, ScoreResponse
from amaris.pipeline.deployment import DeploymentExecutor
from amaris.pipeline.runner import PipelineRunner
from amaris.prompts import load_prompts
from amaris.qdrant import open_qdrant
from amaris.reward import score_rollout
from amaris.rollout_ids import RolloutIds
from amaris.rubric_store import RubricStore
from amaris.scopes import ScopeResolver
from amaris.scoring import Scorer
from amaris.settings import Settings
from amaris.steps import StepCoordinator, enforce_retention

log = logging.getLogger("amaris")

GC_THRESHOLDS = (700, 10, 100)
"""Python's collector thresholds while amaris serves (generations 0, 1, 2)."""

OFFLINE_BANNER = (
    "\n"
    "============================================================================\n"
    " amaris: NO LLM ENDPOINT CONFIGURED - using the OFFLINE rule-based judge.\n"
    " Rewards come from readable rules (answer match, length, hedging...), not\n"
    " from an LLM. Set client.default.base_url / api_key (or OPENAI_API_KEY)\n"
    " to judge with a real model.\n"
    "============================================================================"
)


@dataclass
class Services:
    """The long-lived objects of one amaris process."""

    settings: Settings
    qdrant: QdrantClient
    store: RubricStore
    gateway: LLMGateway
    pipeline_gateway: LLMGateway
    scorer: Scorer
    providers: dict[str, ChatProvider]
    scopes: ScopeResolver
    rollouts: RolloutLog
    steps: StepRegistry
    memory: MemoryStore
    prompts: dict[str, str]
    runner: PipelineRunner
    coordinator: StepCoordinator
    metrics: Metrics
    ids: RolloutIds
    owns_qdrant: bool = True
    _refresher: asyncio.Task[None] | None = None

    @property
    def offline(self) -> bool:
        """True when the scorer is the offline judge."""
        return self.providers["scorer"].offline

    async def score(self, request: ScoreRequest) -> ScoreResponse:
        """The hot path of one rollout (see :func:`amaris.reward.score_rollout`)."""
        return await score_rollout(
            request, scopes=self.scopes, scorer=self.scorer, coordinator=self.coordinator,
            ids=self.ids, sync=self.settings.pipeline.mode == "sync",
        )

    async def start(self) -> None:
        """Start the pipeline thread and resume steps a previous process left completing."""
        self.runner.start()
        await self.coordinator.recover()
        interval = self.settings.memory.rubric_refresh_seconds
        if interval is not None:
            self._refresher = asyncio.create_task(self._refresh_rubrics(interval))
        # Everything loaded so far (Prefect, torch, the stores) lives as long as the process:
        # keep it out of the collector's full passes, which otherwise stall the event loop
        # for hundreds of milliseconds once the memory holds many points.
        gc.collect()
        gc.freeze()
        # Full collections walk every object not frozen; with the default thresholds
        # (700, 10, 10) a step's allocations set off several, of 50-160 ms each, stalling
        # every thread (measured with a gc callback during bench/step_pipeline.py).
        # A tenth as many: cyclic garbage lives a little longer.
        gc.set_threshold(*GC_THRESHOLDS)

    async def _refresh_rubrics(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                changed = await asyncio.to_thread(self.store.refresh)
            except Exception:  # a storage hiccup must not end the refresh loop
                log.exception("rubric refresh failed; retrying in %s s", interval)
                continue
            if changed:
                log.info("rubric version changed elsewhere for scopes %s", changed)

    async def stop(self) -> None:
        """Stop supervising steps, the pipeline thread and the gateways; close Qdrant."""
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        await self.coordinator.close()
        await asyncio.to_thread(self.runner.stop)
        await self.gateway.close()
        await self.pipeline_gateway.close()
        if self.owns_qdrant:
            await asyncio.to_thread(self.qdrant.close)


def build_services(
    settings: Settings,
    *,
    qdrant_location: str | None = None,
    providers: dict[str, ChatProvider] | None = None,
    embedder: Embedder | None = None,
    warm_prefect: bool = False,
    prefect_ready: Callable[[], None] | None = None,
    metrics: Metrics | None = None,
    qdrant: QdrantClient | None = None,
) -> Services:
    """Open storage, initialise the rubric and wire everything (blocking; no I/O to LLMs).

    Prefect is imported when the first step runs (or at start with ``warm_prefect``);
    ``prefect_ready`` blocks until a Prefect server started beside amaris answers.
    ``metrics``: the registry to record into (the app's); default a new one.
    ``qdrant``: a client to share (it stays open on stop): replicas of one store in one
    process, as tests run them; default: opened from ``memory``.
    """
    from amaris.prefect_env import configure_prefect

    configure_prefect(settings)
    providers = providers or build_providers(settings)
    prompts = load_prompts(settings.prompts)
    owns_qdrant = qdrant is None
    qdrant = qdrant or open_qdrant(settings.memory, location=qdrant_location)
    try:
        prefix = settings.memory.collection
        store = RubricStore(qdrant, prefix, settings.memory.rubrics_export_path)
        store.ensure_initialized(settings)
        memory = MemoryStore(qdrant, prefix, embedder or build_embedder(settings.memory,
                                                                         settings.client))
        shared = settings.pipeline.executor == "deployment"
        replica = settings.server.replica if shared else ""
        rollouts = RolloutLog(qdrant, prefix, writer=replica)
        steps = StepRegistry(qdrant, prefix)
    except Exception:
        if owns_qdrant:
            qdrant.close()
        raise
    call_log = CallLog(settings.log_dir)
    metrics = metrics or Metrics()
    # One registry of structured-output modes: a fallback found on either path holds for both.
    output_modes = OutputModes()
    # And of context windows: each endpoint's /v1/models is read once for both.
    windows = ContextWindows()
    gateway = LLMGateway(settings, providers, call_log, observer=metrics.llm_observer("score"),
                         output_modes=output_modes, context_windows=windows)
    pipeline_gateway = LLMGateway(pipeline_gateway_settings(settings),
                                  _fresh(providers, settings), call_log,
                                  observer=metrics.llm_observer("pipeline"),
                                  output_modes=output_modes, context_windows=windows)
    scorer = Scorer(settings.scoring, gateway, store, prompts["scorer"])
    scopes = ScopeResolver(settings, store)
    namespace = store_namespace(settings)

    async def warm_up() -> None:
        from amaris.pipeline.context import PipelineContext, set_context

        set_context(PipelineContext(
            settings=settings, gateway=pipeline_gateway, memory=memory, rollouts=rollouts,
            steps=steps, rubrics=store, prompts=prompts, namespace=namespace,
        ))
        if prefect_ready is not None:
            await asyncio.to_thread(prefect_ready)
        if warm_prefect:
            # Boot (or reach) the Prefect API now rather than at the first step.
            from prefect.client.orchestration import get_client

            async with get_client() as client:
                await client.api_healthcheck()

    async def after_step(step: int) -> None:
        await asyncio.to_thread(enforce_retention, settings, rollouts, memory, step)

    executor = DeploymentExecutor(
        steps, replica, on_done=after_step, work_pool=settings.pipeline.work_pool,
    ) if shared else None

    async def start_pipeline() -> None:
        await warm_up()
        if executor is not None:
            await executor.start()

    runner = PipelineRunner(on_start=start_pipeline)

    def run_step(step: int, new_attempt: bool) -> Any:
        if executor is not None:
            return runner.submit(executor.run(step, new_attempt))
        from flows.step_pipeline import step_pipeline

        return runner.submit(step_pipeline(step))

    coordinator = StepCoordinator(settings, rollouts, steps, run_step, on_done=after_step,
                                  on_finished=metrics.observe_step, shared=shared,
                                  replica=replica, after_wake=settle_heap)
    metrics.watch({"score": gateway, "pipeline": pipeline_gateway}, scorer, store, coordinator)
    if providers["scorer"].offline:
        log.warning(OFFLINE_BANNER)
    return Services(
        settings=settings, qdrant=qdrant, store=store, gateway=gateway,
        pipeline_gateway=pipeline_gateway, scorer=scorer, providers=providers, scopes=scopes,
        rollouts=rollouts, steps=steps, memory=memory, prompts=prompts, runner=runner,
        coordinator=coordinator, metrics=metrics, ids=RolloutIds(rollouts),
        owns_qdrant=owns_qdrant,
    )


UNFREEZE_EVERY = 50
_settled = 0


def settle_heap() -> None:
    """Collect, then freeze what survives (caches, loaded models, warmed-up Prefect).

    Full collections walk every object not frozen: without this, objects a step leaves
    behind make each later full collection stall every thread for 50-160 ms, several
    times a step (measured with a gc callback during ``bench/step_pipeline.py``). Called
    once a step is over, after its waiters are answered: one collection per step.
    Every ``UNFREEZE_EVERY`` steps the frozen objects are collected too, so cycles that
    died after being frozen are not kept for the whole run.
    """
    global _settled
    _settled += 1
    if _settled % UNFREEZE_EVERY == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def pipeline_gateway_settings(settings: Settings) -> Settings:
    """The step path's one retry layer is Prefect's task retries: its gateway tries once."""
    return settings.model_copy(
        update={"gateway": settings.gateway.model_copy(update={"max_attempts": 1})}
    )


def store_namespace(settings: Settings) -> str:
    """The store and collection prefix, as pipeline cache keys name them."""
    where = os.path.abspath(settings.memory.qdrant_url or settings.memory.path)
    return f"{where}/{settings.memory.collection}"


def pipeline_context_from_config() -> Any:
    """A worker process's pipeline context, from the file ``AMARIS_CONFIG`` names.

    A Prefect worker of ``pipeline.work_pool`` runs step flows in processes of its own:
    they open the shared store (``memory.qdrant_url``) and the judge themselves.

    Raises:
        RuntimeError: ``AMARIS_CONFIG`` is not set.
    """
    from pathlib import Path

    from amaris.pipeline.context import PipelineContext
    from amaris.settings import load_settings

    path = os.environ.get("AMARIS_CONFIG")
    if not path:
        raise RuntimeError("amaris pipeline context is not set in this process, and "
                           "AMARIS_CONFIG does not name a configuration to build it from")
    settings = load_settings(Path(path))
    qdrant = open_qdrant(settings.memory)
    prefix = settings.memory.collection
    writer = settings.server.replica if settings.pipeline.executor == "deployment" else ""
    return PipelineContext(
        settings=settings,
        gateway=LLMGateway(pipeline_gateway_settings(settings), build_providers(settings),
                           CallLog(settings.log_dir)),
        memory=MemoryStore(qdrant, prefix, build_embedder(settings.memory, settings.client)),
        rollouts=RolloutLog(qdrant, prefix, writer=writer),
        steps=StepRegistry(qdrant, prefix),
        rubrics=RubricStore(qdrant, prefix, settings.memory.rubrics_export_path),
        prompts=load_prompts(settings.prompts), namespace=store_namespace(settings),
    )


def _fresh(providers: dict[str, ChatProvider], settings: Settings) -> dict[str, ChatProvider]:
    """Providers for the pipeline loop: HTTP clients must not be shared across event loops."""
    if all(p.offline for p in providers.values()):
        return providers
    return build_providers(settings)
