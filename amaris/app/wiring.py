"""The composition root: builds :class:`~amaris.services.Services` from the settings."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import Counter
from collections.abc import Callable

from fastapi import FastAPI
from prefect.client.orchestration import get_client
from qdrant_client import QdrantClient

from amaris.agents.prompts import load_prompts
from amaris.api.app import build_api
from amaris.app.prefect_env import configure_prefect
from amaris.app.retention import PrefectRetention
from amaris.app.step_executor import DeploymentExecutor
from amaris.audit.monitor import FidelityMonitor
from amaris.audit.pause import AuditPause
from amaris.flows.step_pipeline import StepResult, step_pipeline
from amaris.llm.budget import ContextWindows
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, build_providers
from amaris.llm.ledger import TokenLedger
from amaris.llm.output_mode import OutputModes
from amaris.llm.providers import ChatProvider
from amaris.llm.reachability import Reachabilities
from amaris.manifest import ManifestJSON
from amaris.memory.embedder import Embedder, build_embedder, preload
from amaris.memory.precheck_rules import PrecheckRuleStore
from amaris.memory.qdrant import open_qdrant
from amaris.memory.retention import enforce_retention
from amaris.memory.rollout_backend import open_rollout_log
from amaris.memory.rollout_log import StepRegistry
from amaris.memory.store import MemoryStore
from amaris.metrics import Metrics
from amaris.rubric.integrity import check_rubric_store
from amaris.rubric.scopes import ScopeResolver
from amaris.rubric.store import RubricStore
from amaris.scoring.learned_rules import LearnedRules
from amaris.scoring.rollout_ids import RolloutIds
from amaris.scoring.scorer import Scorer
from amaris.services import Services, settle_heap
from amaris.settings import AGENTS, Settings
from amaris.steps.context import (
    PipelineContext,
    pipeline_gateway_settings,
    set_context,
    store_namespace,
)
from amaris.steps.coordinator import StepCoordinator
from amaris.steps.outcomes import StepRun
from amaris.steps.runner import PipelineRunner
from amaris.steps.store import InProcess, SharedStore

log = logging.getLogger("amaris")

OFFLINE_BANNER = (
    "\n"
    "============================================================================\n"
    " amaris: NO LLM ENDPOINT CONFIGURED - using the OFFLINE rule-based judge.\n"
    " Rewards come from readable rules (answer match, length, hedging...), not\n"
    " from an LLM. Set client.default.base_url / api_key (or OPENAI_API_KEY)\n"
    " to judge with a real model.\n"
    "============================================================================"
)


def create_app(
    settings: Settings,
    *,
    qdrant_location: str | None = None,
    providers: dict[str, ChatProvider] | None = None,
    services: Services | None = None,
    embedder: Embedder | None = None,
) -> FastAPI:
    """The amaris API; storage opens and the rubric initialises at start-up.

    Args:
        settings: the validated configuration.
        qdrant_location: ``":memory:"`` to keep Qdrant in memory (tests).
        providers: chat providers per agent; default from the configuration.
        embedder: the memory embedder; default from ``memory.embedding_model``.
        services: already-built services; closed on shutdown.
    """
    if services is not None:
        return build_api(settings, services)

    def build(metrics: Metrics) -> Services:
        return build_services(
            settings,
            qdrant_location=qdrant_location,
            providers=providers,
            embedder=embedder,
            metrics=metrics,
        )

    return build_api(settings, build)


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
    manifest: ManifestJSON | None = None,
) -> Services:
    """Open storage, initialise the rubric and wire everything (blocking; no I/O to LLMs).

    Prefect is imported when the first step runs (or at start with ``warm_prefect``);
    ``prefect_ready`` blocks until a Prefect server started beside amaris answers.
    ``metrics``: the registry to record into (the app's); default a new one.
    ``qdrant``: a client to share (it stays open on stop): replicas of one store in one
    process, as tests run them; default: opened from ``memory``.
    ``manifest``: the run manifest step runs attach as an artifact (``amaris serve``'s).
    """
    configure_prefect(settings)
    providers = providers or build_providers(settings)
    prompts = load_prompts(settings.prompts)
    owns_qdrant = qdrant is None
    qdrant = qdrant or open_qdrant(settings.memory, location=qdrant_location)
    try:
        prefix = settings.memory.collection
        store = RubricStore(qdrant, prefix, settings.memory.rubrics_export_path)
        steps = StepRegistry(qdrant, prefix)
        # Before anything reads or initialises the store: a store that lost versions is
        # restored from rubrics.json or refused, never restarted at version 1.
        check_rubric_store(store, settings.memory.rubrics_export_path, steps)
        store.ensure_initialized(settings)
        embedder = embedder or build_embedder(settings.memory, settings.client)
        # MiniLM loads now, in a thread, while the service starts and scores: the first
        # step's memory retrieval waits for it only if it comes within seconds.
        preload(embedder)
        memory = MemoryStore(qdrant, prefix, embedder)
        shared = settings.pipeline.executor == "deployment"
        replica = settings.server.replica if shared else ""
        # SQLite in the data folder for the embedded store, the Qdrant collection for a
        # shared one: the configuration chooses (amaris/memory/rollout_backend.py).
        rollouts = open_rollout_log(settings, qdrant, writer=replica)
        precheck_rules = PrecheckRuleStore(qdrant, prefix)
    except Exception:
        if owns_qdrant:
            qdrant.close()
        raise
    call_log = CallLog(settings.log_dir)
    metrics = metrics or Metrics()
    # One registry of structured-output modes: a fallback found on either path holds for both.
    output_modes = OutputModes()
    # One ledger: a step's scorer calls and its pipeline calls add up in one table.
    ledger = TokenLedger()
    # One registry of context windows: each endpoint's /v1/models is read once for both.
    windows = ContextWindows()
    gateway = LLMGateway(
        settings,
        providers,
        call_log,
        observer=metrics.llm_observer("score"),
        output_modes=output_modes,
        ledger=ledger,
        context_windows=windows,
    )
    pipeline_gateway = LLMGateway(
        pipeline_gateway_settings(settings),
        _fresh(providers, settings),
        call_log,
        observer=metrics.llm_observer("pipeline"),
        output_modes=output_modes,
        ledger=ledger,
        context_windows=windows,
        step_wall_time=True,
    )
    judge = settings.agents.for_agent("scorer")
    scorer = Scorer(
        settings.scoring,
        gateway,
        store,
        prompts["scorer"],
        samples=judge.samples,
        logprobs=judge.logprobs,
        learned_rules=LearnedRules(precheck_rules),
    )
    scopes = ScopeResolver(settings, store)
    namespace = store_namespace(settings)
    canary: Counter[str] = Counter()
    """The rubric canary's verdicts in this process (step flows run here): /metrics."""
    judge_canaries: Counter[str] = Counter()
    """The judge canaries' probes and alarms in this process: /metrics."""
    fidelity = FidelityMonitor()
    """The audits of the step flows run here: /metrics."""

    async def warm_up() -> None:
        set_context(
            PipelineContext(
                settings=settings,
                gateway=pipeline_gateway,
                memory=memory,
                rollouts=rollouts,
                steps=steps,
                rubrics=store,
                prompts=prompts,
                namespace=namespace,
                manifest=manifest,
                canary=canary,
                precheck_rules=precheck_rules,
                judge_canaries=judge_canaries,
                fidelity=fidelity,
            )
        )
        if prefect_ready is not None:
            await asyncio.to_thread(prefect_ready)
        if warm_prefect:
            # Boot (or reach) the Prefect API now rather than at the first step.
            async with get_client() as client:
                await client.api_healthcheck()

    async def after_step(step: int) -> None:
        await asyncio.to_thread(enforce_retention, settings, rollouts, memory, step)

    # One replica or several: which collaborators run steps and hold their state is the only
    # difference (configuration), not a second path through the coordinator.
    executor = (
        DeploymentExecutor(
            steps,
            replica,
            work_pool=settings.pipeline.work_pool,
        )
        if shared
        else None
    )

    retention = PrefectRetention(settings.prefect, steps)

    async def start_pipeline() -> None:
        await warm_up()
        if executor is not None:
            await executor.start()
        # On the pipeline's loop: it has the Prefect settings the flows run under.
        retention.start()

    runner = PipelineRunner(on_start=start_pipeline)

    async def run_here(step: int) -> StepRun:
        # The flow returns its final state; Prefect gives its caller that state's result.
        return StepResult.model_validate(await step_pipeline(step)).run()

    def run_step(step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        if executor is not None:
            return runner.submit(executor.run(step, new_attempt))
        return runner.submit(run_here(step))

    coordinator = StepCoordinator(
        settings,
        rollouts,
        steps,
        run_step,
        on_done=after_step,
        on_finished=metrics.observe_step,
        store=SharedStore(steps, rollouts) if shared else InProcess(),
        replica=replica,
        after_wake=settle_heap,
    )
    metrics.watch(
        {"score": gateway, "pipeline": pipeline_gateway},
        scorer,
        store,
        coordinator,
        ledger,
        settings.pricing,
        canary,
        fidelity,
    )
    metrics.watch_judge_canaries(judge_canaries, precheck_rules)
    if providers["scorer"].offline:
        log.warning(OFFLINE_BANNER)
    if settings.auditor_on:
        log.info(
            "audit judge on: %s re-grades %.0f%% of each step (at least %d rollouts)",
            "the OFFLINE rule-based judge"
            if providers["auditor"].offline
            else settings.agent_options("auditor").model,
            settings.audit.sample_share * 100,
            settings.audit.min_samples,
        )
    offline = [agent for agent in settings.served_agents if providers[agent].offline]
    if offline:
        log.warning(
            "agents served by the OFFLINE rule-based agents, not an LLM: %s", ", ".join(offline)
        )
    return Services(
        settings=settings,
        qdrant=qdrant,
        store=store,
        gateway=gateway,
        pipeline_gateway=pipeline_gateway,
        scorer=scorer,
        providers=providers,
        scopes=scopes,
        rollouts=rollouts,
        steps=steps,
        memory=memory,
        prompts=prompts,
        runner=runner,
        coordinator=coordinator,
        metrics=metrics,
        ids=RolloutIds(rollouts),
        pause=AuditPause(settings.memory.path),
        owns_qdrant=owns_qdrant,
        precheck_rules=precheck_rules,
        judges=Reachabilities(
            providers, {agent: settings.agent_options(agent).timeout for agent in AGENTS}
        ),
    )


def _fresh(providers: dict[str, ChatProvider], settings: Settings) -> dict[str, ChatProvider]:
    """Providers for the pipeline loop: HTTP clients must not be shared across event loops."""
    if all(p.offline for p in providers.values()):
        return providers
    return build_providers(settings)
