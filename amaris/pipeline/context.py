"""The objects pipeline tasks use, registered once per process.

Tasks take only plain data as parameters (so Prefect can hash them into cache
keys and show them in the UI); the clients they need come from here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from amaris.llm.gateway import LLMGateway
from amaris.memory.rollout_log import RolloutLog, StepRegistry
from amaris.memory.store import MemoryStore
from amaris.rubric_store import RubricStore
from amaris.rubric_update import Bounds
from amaris.settings import Settings


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

    @property
    def bounds(self) -> Bounds:
        """Guardrails of rubric updates."""
        p = self.settings.pipeline
        return Bounds(
            max_adaptive=p.max_adaptive_criteria,
            min_weight=p.adaptive_weight_min,
            max_weight=p.adaptive_weight_max,
            max_modifications=p.max_modifications,
        )

    def prompt_fingerprint(self, agent: str) -> str:
        """Changes when the agent's prompt or model changes (part of cache keys)."""
        options = self.settings.agents.for_agent(agent)
        text = f"{self.prompts[agent]}\x00{options.model}\x00{options.temperature}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


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
        from amaris.service import pipeline_context_from_config

        _context = pipeline_context_from_config()
    return _context
