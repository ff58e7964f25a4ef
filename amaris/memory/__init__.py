"""The pipeline's memory: rollout log, step registry, digest memory and embedders."""

from amaris.memory.embedder import (
    Embedder,
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    build_embedder,
)
from amaris.memory.models import MemoryDocument, MemoryHit, StepRecord
from amaris.memory.rollout_log import RolloutLog, StepRegistry
from amaris.memory.store import MemoryStore

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "MemoryDocument",
    "MemoryHit",
    "MemoryStore",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "RolloutLog",
    "StepRecord",
    "StepRegistry",
    "build_embedder",
]
