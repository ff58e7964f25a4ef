"""What the step's tasks exchange, typed: the criteria and peers an agent reads, the
memory the updater is given, and what became of a scope's rubric update.

The agents' own outputs are their schemas (:mod:`amaris.agents.schemas`:
``IndividualAnalysis``, ``BatchSummary``, ``RubricUpdateProposal``). Models travel between
the tasks and the flow (Prefect persists them as the cached results of the LLM tasks);
they become JSON only at an edge: an agent's prompt, a memory document, the step
registry.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

# Moved to amaris.agents.blocks (the prompts type the blocks that carry them); importable
# here still, for the importers and the task results Prefect pickled under this name.
from amaris.agents.blocks import DynamicMemory as DynamicMemory
from amaris.agents.blocks import ScoredAnalysis as ScoredAnalysis
from amaris.agents.blocks import StaticMemory as StaticMemory
from amaris.agents.payloads import CriterionData, PeerData
from amaris.agents.schemas import AggregatedBehaviour, Strategy
from amaris.memory.records import RolloutRecord
from amaris.rubric.model import RubricVersion
from amaris.scoring.canary_report import CanaryReport
from amaris.steps.outcomes import Dropped, UpdateKind


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AgentCriterion(_Frozen):
    """A criterion of the rubric in force as the agents see it."""

    id: str
    text: str
    weight: float
    kind: Literal["pitfall", "requirement"]
    is_anchor: bool

    @classmethod
    def of(cls, rubric: RubricVersion) -> list[AgentCriterion]:
        """Every criterion of ``rubric``, anchors and adaptive in rubric order."""
        return [
            cls(
                id=c.id,
                text=c.text,
                weight=c.weight,
                kind="pitfall" if c.weight < 0 else "requirement",
                is_anchor=c.is_anchor,
            )
            for c in rubric.criteria
        ]

    def data(self) -> CriterionData:
        """As the agents' blocks carry it (its JSON)."""
        return {
            "id": self.id,
            "text": self.text,
            "weight": self.weight,
            "kind": self.kind,
            "is_anchor": self.is_anchor,
        }


class Peer(_Frozen):
    """Another rollout answering the same prompt (its GRPO group), as the analyzer sees it."""

    id: str
    output: str
    """Its first 1,000 characters."""
    score: float | None

    @classmethod
    def of(cls, record: RolloutRecord) -> Peer:
        return cls(id=record.rollout.id, output=record.rollout.output[:1000], score=record.score)

    def data(self) -> PeerData:
        """As the analyzer's data block carries it (its JSON)."""
        return {"id": self.id, "output": self.output, "score": self.score}


class RetrievedMemory(_Frozen):
    """What the updater is given of the past: recent steps and matched documents."""

    static: list[StaticMemory]
    dynamic: list[DynamicMemory]
    queries: list[str]


_NOT_ASKED: frozenset[UpdateKind] = frozenset({"skipped", "no_update"})


class UpdateOutcome(_Frozen):
    """What became of a scope's rubric update.

    As JSON (what the step registry, ``GET /steps`` and the memory keep): ``reason``,
    ``canary`` and ``retired_uninformative`` only when set, ``strategy`` only when the
    updater was asked (``null`` when its output was invalid).
    """

    outcome: UpdateKind
    version: int
    """The rubric version in force for the scope after the update."""
    base_version: int
    """The version the update started from."""
    strategy: Strategy | None = None
    reason: str | None = None
    canary: CanaryReport | None = None
    """The rubric canary's report on the candidate (its probes left out of the JSON)."""
    retired_uninformative: list[str] | None = None
    """Criteria retired with the update for being uninformative."""

    @model_serializer(mode="wrap")
    def _as_recorded(self, handler: SerializerFunctionWrapHandler) -> object:
        data = handler(self)
        if not isinstance(data, dict):  # pragma: no cover - a model serialises to a dict
            return data
        for name in ("reason", "canary", "retired_uninformative"):
            if getattr(self, name) is None:
                data.pop(name, None)
        if self.outcome in _NOT_ASKED:
            data.pop("strategy", None)
        if isinstance(data.get("canary"), dict):
            data["canary"].pop("probes", None)
        return data


class ScopeOutcome(UpdateOutcome):
    """A scope's outcome in a step: its update's, with the rollouts it had, the hacking
    its summary found and the outputs it went on without."""

    rollouts: int
    hacking: list[AggregatedBehaviour]
    dropped: list[Dropped]

    @classmethod
    def of(
        cls,
        update: UpdateOutcome,
        rollouts: int,
        hacking: list[AggregatedBehaviour],
        dropped: list[Dropped],
    ) -> ScopeOutcome:
        return cls(**dict(update), rollouts=rollouts, hacking=hacking, dropped=dropped)
