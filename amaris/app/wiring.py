"""The composition root: builds :class:`~amaris.services.Services` from the settings.

:func:`build_services` composes one builder per job: the stores (:func:`open_stores`), the
LLM gateways (:func:`build_gateways`), the scorer (:func:`build_scorer`), the step path
(:func:`build_step_path`) and what the metrics read of them (:func:`watch_metrics`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI
from qdrant_client import QdrantClient

from amaris.agents.prompts import load_prompts
from amaris.app.prefect_env import configure_prefect
from amaris.app.step_path import StepPath, StepPathStart, build_step_path
from amaris.app.stores import Stores, open_stores
from amaris.llm.budget import ContextWindows
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, build_providers
from amaris.llm.ledger import TokenLedger
from amaris.llm.output_mode import OutputModes
from amaris.llm.providers import ChatProvider
from amaris.llm.rate_limits import RateLimits
from amaris.llm.reachability import Reachabilities
from amaris.manifest import ManifestJSON
from amaris.memory.embedder import Embedder
from amaris.memory.qdrant import open_qdrant
from amaris.metrics import Metrics
from amaris.rubric.scopes import ScopeResolver
from amaris.scoring.cascade import CascadeScorer
from amaris.scoring.rollout_ids import RolloutIds
from amaris.scoring.scorer import Scorer
from amaris.services import Services
from amaris.settings import AGENTS, Settings
from amaris.steps.context import pipeline_gateway_settings
from amaris.trust.audit.pause import AuditPause
from amaris.trust.learned_rules import LearnedRules
from api.app import build_api

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
        stores = open_stores(settings, qdrant, embedder)
    except Exception:
        if owns_qdrant:
            qdrant.close()
        raise
    metrics = metrics or Metrics()
    gateways = build_gateways(settings, providers, metrics)
    scorer = build_scorer(settings, gateways.score, stores, prompts)
    scopes = ScopeResolver(settings, stores.rubrics)
    steps = build_step_path(
        settings,
        stores,
        gateways.pipeline,
        prompts,
        StepPathStart(manifest=manifest, warm_prefect=warm_prefect, prefect_ready=prefect_ready),
        on_finished=metrics.observe_step,
    )
    watch_metrics(metrics, settings, gateways, scorer, stores, steps)
    log_judges(settings, providers)
    return Services(
        settings=settings,
        qdrant=qdrant,
        store=stores.rubrics,
        gateway=gateways.score,
        pipeline_gateway=gateways.pipeline,
        scorer=scorer,
        providers=providers,
        scopes=scopes,
        rollouts=stores.rollouts,
        steps=stores.steps,
        memory=stores.memory,
        prompts=prompts,
        runner=steps.runner,
        coordinator=steps.coordinator,
        metrics=metrics,
        ids=RolloutIds(stores.rollouts),
        pause=AuditPause(settings.memory.path),
        owns_qdrant=owns_qdrant,
        precheck_rules=stores.precheck_rules,
        judges=Reachabilities(
            providers, {agent: settings.agent_options(agent).timeout for agent in AGENTS}
        ),
    )


@dataclass(frozen=True)
class Gateways:
    """The LLM gateways of the hot path (``score``) and of the step path (``pipeline``)."""

    score: LLMGateway
    pipeline: LLMGateway
    ledger: TokenLedger
    """Both gateways' token use: a step's scorer calls and its pipeline calls in one table."""


def build_gateways(
    settings: Settings, providers: dict[str, ChatProvider], metrics: Metrics
) -> Gateways:
    """The two gateways, sharing one call log, ledger and registries of what each endpoint
    supports; the step path's on providers of its own (:func:`_fresh`)."""
    call_log = CallLog(settings.log_dir)
    # One registry of structured-output modes: a fallback found on either path holds for both.
    output_modes = OutputModes()
    ledger = TokenLedger()
    # One registry of context windows: each endpoint's /v1/models is read once for both.
    windows = ContextWindows()
    # One gate per endpoint and model: its rate limits hold for both paths together.
    rates = RateLimits()
    gateway = LLMGateway(
        settings,
        providers,
        call_log,
        observer=metrics.llm_observer("score"),
        output_modes=output_modes,
        ledger=ledger,
        context_windows=windows,
        rate_limits=rates,
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
        rate_limits=rates,
    )
    return Gateways(gateway, pipeline_gateway, ledger)


def build_scorer(
    settings: Settings, gateway: LLMGateway, stores: Stores, prompts: dict[str, str]
) -> Scorer:
    """The hot path's scorer: the judge the configuration names (behind the cheap scorer
    when the cascade is on), the rules it learned."""
    if settings.cascade_on:
        rules = LearnedRules(stores.precheck_rules)
        return CascadeScorer(
            settings, gateway, stores.rubrics, prompts["scorer"], learned_rules=rules
        )
    judge = settings.agents.for_agent("scorer")
    return Scorer(
        settings.scoring,
        gateway,
        stores.rubrics,
        prompts["scorer"],
        samples=judge.samples,
        logprobs=judge.logprobs,
        learned_rules=LearnedRules(stores.precheck_rules),
    )


def watch_metrics(
    metrics: Metrics,
    settings: Settings,
    gateways: Gateways,
    scorer: Scorer,
    stores: Stores,
    steps: StepPath,
) -> None:
    """Export the counters of what was built, read at each scrape of ``/metrics``."""
    metrics.watch(
        {"score": gateways.score, "pipeline": gateways.pipeline},
        scorer,
        stores.rubrics,
        steps.coordinator,
        gateways.ledger,
        steps.context.canary,
        steps.context.fidelity,
    )
    metrics.watch_judge_canaries(steps.context.judge_canaries, stores.precheck_rules)


def log_judges(settings: Settings, providers: dict[str, ChatProvider]) -> None:
    """Say which agents the offline rule-based judge serves, and the audit judge's share."""
    if providers["scorer"].offline:
        log.warning(OFFLINE_BANNER)
    if settings.auditor_on:
        log.info(
            "audit judge on: %s re-grades %.0f%% of each step (at least %d rollouts), "
            "within audit.budget_share %s with the judge canaries",
            "the OFFLINE rule-based judge"
            if providers["auditor"].offline
            else settings.agent_options("auditor").model,
            settings.audit.sample_share * 100,
            settings.audit.min_samples,
            settings.audit.budget_share,
        )
    offline = [agent for agent in settings.served_agents if providers[agent].offline]
    if offline:
        log.warning(
            "agents served by the OFFLINE rule-based agents, not an LLM: %s", ", ".join(offline)
        )


def _fresh(providers: dict[str, ChatProvider], settings: Settings) -> dict[str, ChatProvider]:
    """Providers for the pipeline loop: HTTP clients must not be shared across event loops."""
    if all(p.offline for p in providers.values()):
        return providers
    return build_providers(settings)
