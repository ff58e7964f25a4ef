"""Updater: propose changes to the adaptive rubric from the summary and memory."""

from __future__ import annotations

from amaris.agents.blocks import TrainerMetadata, UpdaterContext, UpdaterInput
from amaris.agents.schemas import BatchSummary, RubricUpdateProposal
from amaris.rubric.informativeness import UpdaterView
from amaris.steps.context import get_context
from amaris.trust.audit.models import AlarmEvidence
from tasks._common import ask, at_most_items, dumped, llm_task
from tasks.models import AgentCriterion, RetrievedMemory


@llm_task("updater", "update-rubric", "update-rubric-{scope}")
async def propose_update(
    step: int,
    scope: str,
    rubric_version: int,
    metadata: TrainerMetadata,
    criteria: list[AgentCriterion],
    summary: BatchSummary,
    memory: RetrievedMemory,
    informativeness: UpdaterView,
    alarm: AlarmEvidence | None = None,
    trajectory: bool = False,
) -> RubricUpdateProposal:
    """The updater's proposal (strategy, modifications, rationale, memory consultation).

    ``informativeness``: this step's ``criterion_stats`` and the criteria ``uninformative``
    for ``rubric.retire_uninformative_after`` steps
    (:func:`amaris.rubric.informativeness.updater_view`). ``alarm``: the step's fidelity
    alarm and its evidence in this scope (the judge now misreads something), when fired.
    ``trajectory``: some of the scope's rollouts this step are agents' trajectories (the
    template's trajectory sections are sent)."""
    ctx = get_context()
    bounds = ctx.bounds
    context: UpdaterContext = {
        "criteria": [c.data() for c in criteria],
        "bounds": {
            "max_adaptive": bounds.max_adaptive,
            "min_weight": bounds.min_weight,
            "max_weight": bounds.max_weight,
            "max_modifications": bounds.max_modifications,
        },
    }
    data: UpdaterInput = {
        "step": step,
        "metadata": metadata,
        "summary": summary,
        "static_memory": dumped(memory.static),
        "dynamic_memory": dumped(memory.dynamic),
        "criterion_stats": dumped(informativeness.criterion_stats),
        "uninformative": dumped(informativeness.uninformative),
    }
    if alarm is not None:
        data["fidelity_alarm"] = alarm
    return await ask(
        "updater",
        context,
        data,
        RubricUpdateProposal,
        step,
        at_most_items(RubricUpdateProposal, "rubric_modifications", bounds.max_modifications),
        trajectory=trajectory,
    )
