"""One rollout through the hot path: scope, rubric, judge, rollout log, sync wait."""

from __future__ import annotations

from typing import Any

from amaris.context import request_id_var
from amaris.models import ScoreRequest, ScoreResponse
from amaris.rubric.scopes import ScopeResolver
from amaris.scoring.rollout_ids import RolloutIds
from amaris.scoring.scorer import Scorer
from amaris.steps.coordinator import StepCoordinator


def log_record(request: ScoreRequest, result: ScoreResponse, scope: str) -> dict[str, Any]:
    """What the rollout log keeps of a scored rollout."""
    return {
        "scope": scope,
        "rollout": request.rollout.model_dump(mode="json"),
        "metadata": request.metadata.model_dump(mode="json"),
        "score": result.score if result.status == "scored" else None,
        "status": result.status,
        "reason": result.reason,
        "rubric_version": result.rubric_version,
        "verdicts": [c.model_dump(mode="json") for c in result.breakdown or []],
        "request_id": request_id_var.get(),
    }


async def score_rollout(
    request: ScoreRequest,
    *,
    scopes: ScopeResolver,
    scorer: Scorer,
    coordinator: StepCoordinator,
    ids: RolloutIds,
    sync: bool,
) -> ScoreResponse:
    """Check, admit the rollout's step, score, log durably (before answering), and in sync
    mode wait for the step's update and score again under the rubric it produced.

    Nothing is judged, created or stored before the request passed its checks.

    Raises:
        OversizeError: a free-text field is over ``scoring.max_field_chars``.
        StepRefusedError: the step is refused.
        RolloutConflictError: the rollout id is in the step with other content.
    """
    scorer.check(request)
    step = request.metadata.current_step
    async with coordinator.admission(step):
        claim = await ids.claim(step, request.rollout)
        stored = False
        try:
            scope = scopes.scope_of(request.rollout.input)
            rubric = await scopes.rubric(scope)
            result = await scorer.score(request, rubric)
            await coordinator.record(step, log_record(request, result, scope))
            stored = True
        finally:
            ids.release(claim, stored)
    if sync:
        await coordinator.wait(step)
        updated = await scopes.rubric(scope)
        if updated.version != rubric.version:
            result = await scorer.score(request, updated)
    if not request.include_breakdown:
        result = result.model_copy(update={"breakdown": None})
    return result
