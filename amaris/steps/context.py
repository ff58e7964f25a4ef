"""The objects pipeline tasks use, registered once per process.

Tasks take only plain data as parameters (so Prefect can hash them into cache
keys and show them in the UI); the clients they need come from here.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from amaris.agents.prompts import load_prompts, prompt_fingerprint
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, build_providers
from amaris.manifest import ManifestJSON, build_manifest
from amaris.memory.embedder import build_embedder
from amaris.memory.qdrant import open_qdrant
from amaris.memory.rollout_backend import open_rollout_log
from amaris.memory.rollout_log import RolloutLog, StepRegistry
from amaris.memory.store import MemoryStore
from amaris.rubric.guardrails import Bounds
from amaris.rubric.store import RubricStore
from amaris.settings import AgentName, Settings, load_settings, template_agent
from amaris.trust.audit.monitor import FidelityMonitor
from amaris.trust.rule_store import PrecheckRuleStore


@dataclass
class PipelineContext:
    """Everything a step flow touches."""

    settings: Settings
    gateway: LLMGateway
    memory: MemoryStore
    rollouts: RolloutLog
    steps: StepRegistry
    rubrics: RubricStore
    prompts: dict[str, str]
    namespace: str
    """Identifies this data folder + collection in cache keys, so two runs never share work."""
    manifest: ManifestJSON | None = None
    """The run manifest (:mod:`amaris.manifest`) each step run shows as an artifact."""
    canary: Counter[str] = field(default_factory=Counter)
    """Rubric canary verdicts (``passed``, ``refused``, ``skipped``) and ``probes`` judged,
    in this process (``/metrics``: ``amaris_rubric_canary``)."""
    precheck_rules: PrecheckRuleStore | None = None
    """The pre-check's learned rules, which judge canary alarms add to."""
    judge_canaries: Counter[str] = field(default_factory=Counter)
    """Judge canary ``probes.<kind>`` and ``alarms.<kind>`` in this process (``/metrics``:
    ``amaris_judge_canary_*``)."""
    fidelity: FidelityMonitor = field(default_factory=FidelityMonitor)
    """The latest audit's figures and the alarms counted (``/metrics``)."""
    _fingerprints: dict[AgentName, str] = field(default_factory=dict, init=False, repr=False)

    @property
    def bounds(self) -> Bounds:
        """Guardrails of rubric updates."""
        p = self.settings.pipeline
        return Bounds(
            max_adaptive=p.max_adaptive_criteria,
            min_weight=p.adaptive_weight_min,
            max_weight=p.adaptive_weight_max,
            max_modifications=p.max_modifications,
            duplicate_similarity=p.duplicate_similarity,
            edit_similarity=p.edit_similarity,
        )

    def prompt_fingerprint(self, agent: AgentName) -> str:
        """Changes when the agent's prompt or model changes (part of cache keys; computed
        once per agent: a step asks for it per rollout)."""
        known = self._fingerprints.get(agent)
        if known is None:
            options = self.settings.agents.for_agent(agent)
            template = self.prompts[template_agent(agent)]
            known = prompt_fingerprint(template, options.model, options.temperature)
            self._fingerprints[agent] = known
        return known


_context: PipelineContext | None = None


def set_context(context: PipelineContext | None) -> None:
    """Register (or clear) the process's pipeline context."""
    global _context
    _context = context


def get_context() -> PipelineContext:
    """The registered context; in a process of its own (a work-pool worker's flow run),
    built once from the configuration ``AMARIS_CONFIG`` names.

    Raises:
        RuntimeError: no amaris pipeline is set up in this process, and no
            ``AMARIS_CONFIG`` to build one from.
    """
    global _context
    if _context is None:
        _context = context_from_config()
    return _context


def pipeline_gateway_settings(settings: Settings) -> Settings:
    """The step path's one retry layer is Prefect's task retries: its gateway tries once."""
    return settings.model_copy(
        update={"gateway": settings.gateway.model_copy(update={"max_attempts": 1})}
    )


def store_namespace(settings: Settings) -> str:
    """The store and collection prefix, as pipeline cache keys name them."""
    where = os.path.abspath(settings.memory.qdrant_url or settings.memory.path)
    return f"{where}/{settings.memory.collection}"


def context_from_config() -> PipelineContext:
    """A worker process's pipeline context, from the file ``AMARIS_CONFIG`` names.

    A Prefect worker of ``pipeline.work_pool`` runs step flows in processes of its own:
    they open the shared store (``memory.qdrant_url``) and the judge themselves.

    Raises:
        RuntimeError: ``AMARIS_CONFIG`` is not set.
    """
    path = os.environ.get("AMARIS_CONFIG")
    if not path:
        raise RuntimeError(
            "amaris pipeline context is not set in this process, and "
            "AMARIS_CONFIG does not name a configuration to build it from"
        )
    settings = load_settings(Path(path))
    prompts = load_prompts(settings.prompts)
    qdrant = open_qdrant(settings.memory)
    prefix = settings.memory.collection
    writer = settings.server.replica if settings.pipeline.executor == "deployment" else ""
    return PipelineContext(
        settings=settings,
        gateway=LLMGateway(
            pipeline_gateway_settings(settings),
            build_providers(settings),
            CallLog(settings.log_dir),
            step_wall_time=True,
        ),
        memory=MemoryStore(qdrant, prefix, build_embedder(settings.memory, settings.client)),
        rollouts=open_rollout_log(settings, qdrant, writer=writer),
        steps=StepRegistry(qdrant, prefix),
        rubrics=RubricStore(qdrant, prefix, settings.memory.rubrics_export_path),
        prompts=prompts,
        namespace=store_namespace(settings),
        manifest=build_manifest(settings, prompts, "worker"),
        precheck_rules=PrecheckRuleStore(qdrant, prefix),
    )
