"""What the step's tasks exchange, typed: the criteria and peers an agent reads and the
memory the updater is given. What became of a scope's rubric update
(:class:`~amaris.steps.outcomes.ScopeOutcome`) is the coordinator's too: it lives below.

The agents' own outputs are their schemas (:mod:`amaris.agents.schemas`:
``IndividualAnalysis``, ``BatchSummary``, ``RubricUpdateProposal``). Models travel between
the tasks and the flow (Prefect persists them as the cached results of the LLM tasks);
they become JSON only at an edge: an agent's prompt, a memory document, the step
registry.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

# Moved to amaris.agents.blocks (the prompts type the blocks that carry them); importable
# here still, for the importers and the task results Prefect pickled under this name.
from amaris.agents.blocks import DynamicMemory as DynamicMemory
from amaris.agents.blocks import ScoredAnalysis as ScoredAnalysis
from amaris.agents.blocks import StaticMemory as StaticMemory
from amaris.agents.payloads import CriterionData, PeerData
from amaris.memory.records import LoggedRollout, RolloutRecord
from amaris.rubric.model import RubricVersion

# Moved to amaris.steps.outcomes (the coordinator and the API carry them typed); importable
# here still, for the importers and the task results Prefect pickled under this name.
from amaris.steps.outcomes import ScopeOutcome as ScopeOutcome
from amaris.steps.outcomes import UpdateOutcome as UpdateOutcome
from amaris.trajectory import outcome_lines


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


PEER_CHARS = 1000
"""Characters of another rollout of the group the analyzer is shown."""


def is_trajectory(rollout: LoggedRollout) -> bool:
    """Whether ``rollout`` was logged as an agent's trajectory (with its ``messages``): its
    analysis, and its scope's update, are sent their templates' trajectory sections."""
    return bool((rollout.model_extra or {}).get("messages"))


def outcome_tail(rollout: LoggedRollout) -> str:
    """The lines that end a trajectory's output, its outcome and finish reason: what the
    analyzer judges the trajectory against ("" for a string rollout)."""
    if not is_trajectory(rollout):
        return ""
    extra = rollout.model_extra or {}
    outcome, finish = extra.get("outcome"), extra.get("finish_reason")
    return "\n".join(
        outcome_lines(
            outcome if isinstance(outcome, dict) else None,
            finish if isinstance(finish, str) else None,
        )
    )


class Peer(_Frozen):
    """Another rollout answering the same prompt (its GRPO group), as the analyzer sees it."""

    id: str
    output: str
    """Its first :data:`PEER_CHARS` characters; of a trajectory, its outcome lines last."""
    score: float | None

    @classmethod
    def of(cls, record: RolloutRecord) -> Peer:
        output = record.rollout.output
        if len(output) > PEER_CHARS:
            tail = outcome_tail(record.rollout)
            kept = tail if tail and output.endswith(tail) and len(tail) < PEER_CHARS // 2 else ""
            head = output[: PEER_CHARS - len(kept) - 1 if kept else PEER_CHARS]
            output = f"{head}\n{kept}" if kept else head
        return cls(id=record.rollout.id, output=output, score=record.score)

    def data(self) -> PeerData:
        """As the analyzer's data block carries it (its JSON)."""
        return {"id": self.id, "output": self.output, "score": self.score}


class RetrievedMemory(_Frozen):
    """What the updater is given of the past: recent steps and matched documents."""

    static: list[StaticMemory]
    dynamic: list[DynamicMemory]
    queries: list[str]
