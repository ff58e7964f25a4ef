"""``POST /score`` and ``POST /batch_score``."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response

from amaris.models import (
    BatchScoreRequest,
    BatchScoreResponse,
    ScoreRequest,
    ScoreResponse,
)
from amaris.scoring.batch import InvalidItem
from api.deps import ServicesDep, batch_scoring, score_one
from api.errors import CONFLICT_ERRORS, STEP_ERRORS
from api.errors import INPUT_ERRORS as _ERRORS

router = APIRouter(tags=["scoring"])


@router.post(
    "/score",
    response_model=ScoreResponse,
    responses={
        **_ERRORS,
        **STEP_ERRORS,
        **CONFLICT_ERRORS,
        503: {
            "model": ScoreResponse,
            "description": "Unscored with `scoring.on_failure: error`; or (an error body, "
            "`storage_unavailable`) the rollout log refused the write: full disk, locked "
            "database. Nothing was stored; retry after Retry-After. Or (`scoring_paused`) "
            "a fidelity alarm paused scoring (`audit.on_alarm: pause`) until `amaris audit "
            "ack` or `POST /audit/ack`.",
        },
    },
)
async def score(body: ScoreRequest, services: ServicesDep) -> Response:
    """Score one rollout against the rubric in force (the path: :mod:`amaris.scoring.reward`).

    ``status`` is ``scored`` or ``unscored`` (the judge gave no valid verdict; ``reason``
    says why and ``score`` follows ``scoring.on_failure``). A refused
    ``metadata.current_step`` (see ``pipeline.max_step``, ``max_steps_ahead``,
    ``max_open_steps``) answers 422 or 409 before the judge is asked. A rollout id already
    in its step with other content is a 409 too; the same rollout sent again is scored and
    logged again (the step's analysis keeps its last record).
    """
    result = await score_one(body, services)
    policy = services.settings.scoring
    if result.status == "unscored" and policy.on_failure == "error":
        return JSONResponse(
            jsonable_encoder(result),
            status_code=503,
            headers={"Retry-After": str(policy.retry_after_seconds)},
        )
    # Already a validated ScoreResponse: serialised once, not re-validated by FastAPI.
    return Response(result.model_dump_json(), media_type="application/json")


@router.post("/batch_score", response_model=BatchScoreResponse, responses=_ERRORS)
async def batch_score(body: BatchScoreRequest, services: ServicesDep) -> BatchScoreResponse:
    """Score many rollouts concurrently. Each item has its own status.

    Every item is validated before any is judged. An item that does not validate (or is
    oversized, or its step is refused, or it reuses a rollout id of its step with other
    content) gets ``status: invalid`` with a reason naming ``items[i].<field>``, and
    changes nothing; the other items are scored normally (:mod:`amaris.scoring.batch`).
    """
    batch = batch_scoring(services)
    batch.admit("items", len(body.items))
    checked = [batch.check(i, raw, body.include_breakdown) for i, raw in enumerate(body.items)]
    results = await batch.score(checked)
    return BatchScoreResponse(
        results=[_invalid(r) if isinstance(r, InvalidItem) else r for r in results]
    )


def _invalid(item: InvalidItem) -> ScoreResponse:
    """An item's ``status: invalid`` answer: its reason names ``items[i].<field>``."""
    return ScoreResponse(
        score=None,
        rubric_version=None,
        status="invalid",
        rollout_id=item.rollout_id,
        reason=item.reason(),
    )
