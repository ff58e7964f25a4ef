"""Updater: propose changes to the adaptive rubric from the summary and memory."""

from __future__ import annotations

from typing import Any

from amaris.agents.schemas import RubricUpdateProposal
from amaris.audit.models import AlarmEvidence
from amaris.steps.context import get_context
from amaris.tasks._common import ask, at_most_items, llm_task


@llm_task("updater", "update-rubric", "update-rubric-{scope}")
async def propose_update(
    step: int,
    scope: str,
    rubric_version: int,
    metadata: dict[str, Any],
    criteria: list[dict[str, Any]],
    summary: dict[str, Any],
    memory: dict[str, Any],
    informativeness: dict[str, Any],
    alarm: AlarmEvidence | None = None,
) -> RubricUpdateProposal:
    """The updater's proposal (strategy, modifications, rationale, memory consultation).

    ``informativeness``: this step's ``criterion_stats`` and the criteria ``uninformative``
    for ``rubric.retire_uninformative_after`` steps
    (:func:`amaris.rubric.informativeness.updater_view`). ``alarm``: the step's fidelity
    alarm and its evidence in this scope (the judge now misreads something), when fired."""
    ctx = get_context()
    bounds = ctx.bounds
    context = {
        "criteria": criteria,
        "bounds": {
            "max_adaptive": bounds.max_adaptive,
            "min_weight": bounds.min_weight,
            "max_weight": bounds.max_weight,
            "max_modifications": bounds.max_modifications,
        },
    }
    data = {
        "step": step,
        "metadata": metadata,
        "summary": summary,
        "static_memory": memory["static"],
        "dynamic_memory": memory["dynamic"],
        "criterion_stats": informativeness["criterion_stats"],
        "uninformative": informativeness["uninformative"],
    }
    if alarm is not None:
        data["fidelity_alarm"] = alarm.model_dump(mode="json")
    return await ask(
        "updater",
        context,
        data,
        RubricUpdateProposal,
        step,
        at_most_items(RubricUpdateProposal, "rubric_modifications", bounds.max_modifications),
    )
