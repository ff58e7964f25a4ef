"""``POST /score`` and ``POST /batch_score``."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError

from amaris.models import (
    BatchScoreRequest,
    BatchScoreResponse,
    ScoreRequest,
    ScoreResponse,
)
from amaris.scoring.batch import InvalidItem
from amaris.services import Services
from api.deps import ServicesDep, batch_scoring, score_one
from api.errors import CONFLICT_ERRORS, STEP_ERRORS
from api.errors import INPUT_ERRORS as _ERRORS


class ScoreRoute(APIRoute):
    """``POST /score`` without FastAPI's per-request dependency solving.

    FastAPI resolves a route's dependencies and validates its body through its own layers
    on every request, a large share of the event loop's CPU per ``/score`` inside the app.
    This handler does the same work directly: one ``model_validate_json`` of the body
    (errors answered as FastAPI's 422), then the endpoint with its two parameters (the
    bearer key and the body's type were checked at the edge,
    :class:`api.middleware.RequestGuard`). The endpoint's signature still defines
    the route's OpenAPI schema. Any other dependency would be skipped, so the route
    refuses one.
    """

    _HANDLED = frozenset({"get_services"})

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        skipped = sorted(
            getattr(dep.call, "__name__", repr(dep.call))
            for dep in self.dependant.dependencies
            if getattr(dep.call, "__name__", None) not in self._HANDLED
        )
        if skipped:
            raise TypeError(f"ScoreRoute {path} would skip dependencies {skipped}")

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint = self.endpoint

        async def handle(request: Request) -> Response:
            services: Services = request.app.state.services
            raw = await request.body()
            try:
                body = ScoreRequest.model_validate_json(raw)
            except ValidationError as exc:
                raise RequestValidationError(_field_errors(raw, exc)) from None
            response: Response = await endpoint(body=body, services=services)
            return response

        return handle


def _field_errors(raw: bytes, exc: ValidationError) -> list[Any]:
    """The errors of a /score body, naming fields where the JSON parser named none.

    The JSON parser refuses some bodies as a whole (a lone surrogate escape, nesting past
    its own limit) where the other routes' validation names the field: such a body is
    parsed again with ``json`` and validated as they validate theirs. Only on this path.
    """
    errors = exc.errors(include_url=False)
    if not any(err.get("type") == "json_invalid" for err in errors):
        return errors
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return errors
    try:
        ScoreRequest.model_validate(data)
    except ValidationError as named:
        return named.errors(include_url=False)
    return errors


router = APIRouter(tags=["scoring"])
score_router = APIRouter(tags=["scoring"], route_class=ScoreRoute)
"""``/score`` alone, with its lean handler (:class:`ScoreRoute`)."""


@score_router.post(
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
