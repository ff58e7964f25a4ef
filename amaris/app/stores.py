"""What amaris keeps, opened from the settings (for :func:`amaris.app.wiring.build_services`):
rubrics, step records, rollouts, memory and the pre-check's learned rules."""

from __future__ import annotations

from dataclasses import dataclass

from qdrant_client import QdrantClient

from amaris.memory.embedder import Embedder, build_embedder, preload
from amaris.memory.rollout_backend import open_rollout_log
from amaris.memory.rollout_log import RolloutLog, StepRegistry
from amaris.memory.store import MemoryStore
from amaris.rubric.integrity import check_rubric_store
from amaris.rubric.store import RubricStore
from amaris.settings import Settings
from amaris.trust.rule_store import PrecheckRuleStore


def replicated(settings: Settings) -> bool:
    """Several replicas of one store (``pipeline.executor: deployment``)."""
    return settings.pipeline.executor == "deployment"


def replica_name(settings: Settings) -> str:
    """This process's name among the replicas; empty when it is the only one."""
    return settings.server.replica if replicated(settings) else ""


@dataclass(frozen=True)
class Stores:
    """What amaris keeps: rubrics, step records, rollouts, memory, learned pre-check rules."""

    rubrics: RubricStore
    steps: StepRegistry
    rollouts: RolloutLog
    memory: MemoryStore
    precheck_rules: PrecheckRuleStore


def open_stores(settings: Settings, qdrant: QdrantClient, embedder: Embedder | None) -> Stores:
    """The stores on ``qdrant`` (and the rollout log the configuration chooses), the rubric
    store checked and initialised; ``embedder``: default from ``memory.embedding_model``."""
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
    # SQLite in the data folder for the embedded store, the Qdrant collection for a
    # shared one: the configuration chooses (amaris/memory/rollout_backend.py).
    rollouts = open_rollout_log(settings, qdrant, writer=replica_name(settings))
    precheck_rules = PrecheckRuleStore(qdrant, prefix)
    return Stores(
        rubrics=store, steps=steps, rollouts=rollouts, memory=memory, precheck_rules=precheck_rules
    )
