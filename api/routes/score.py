"""``POST /score`` and ``POST /batch_score``."""

from __future__ import annotations

import asyncio
import logging
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
from amaris.scoring import OverloadedError, OversizeError
from amaris.service import Services
from api.deps import ServicesDep
from api.errors import INPUT_ERRORS as _ERRORS
from api.errors import validation_details

log = logging.getLogger("amaris.api")


class ScoreRoute(APIRoute):
    """``POST /score`` without FastAPI's per-request dependency solving.

    FastAPI resolves a route's dependencies and validates its body through its own layers
    on every request: about a third of the event loop's CPU per ``/score`` inside the app
    (``bench/score_app_cpu.py``, ``docs/benchmarks.md``). This handler does the same work
    directly: one ``model_validate_json`` of the body (errors answered as FastAPI's 422),
    then the endpoint with its two parameters (the bearer key and the body's type were
    checked at the edge, :class:`api.middleware.RequestGuard`). The endpoint's signature
    still defines the route's OpenAPI schema. Any other dependency would be skipped, so
    the route refuses one.
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
            try:
                body = ScoreRequest.model_validate_json(await request.body())
            except ValidationError as exc:
                raise RequestValidationError(exc.errors(include_url=False)) from None
            response: Response = await endpoint(body=body, services=services)
            return response

        return handle


router = APIRouter(tags=["scoring"])
score_router = APIRouter(tags=["scoring"], route_class=ScoreRoute)
"""``/score`` alone, with its lean handler (:class:`ScoreRoute`)."""


@score_router.post(
    "/score",
    response_model=ScoreResponse,
    responses={
        **_ERRORS,
        503: {"model": ScoreResponse, "description": "Unscored with `scoring.on_failure: error`."},
    },
)
async def score(body: ScoreRequest, services: ServicesDep) -> Response:
    """Score one rollout against the rubric in force.

    ``status`` is ``scored`` or ``unscored`` (the judge gave no valid verdict; ``reason``
    says why and ``score`` follows ``scoring.on_failure``).
    """
    result = await services.score(body)
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

    An item that does not validate (or is oversized) gets ``status: invalid`` with a
    reason naming ``items[i].<field>``; the other items are scored normally.
    """
    max_items = services.settings.server.max_batch_items
    if len(body.items) > max_items:
        raise OversizeError("items", len(body.items), max_items, unit="items")
    limit = services.settings.scoring.max_pending
    if limit is not None and services.scorer.pending + len(body.items) > limit:
        raise OverloadedError(f"{services.scorer.pending} judge calls pending and "
                              f"{len(body.items)} more asked (max_pending {limit})")

    async def one(index: int, raw: object) -> ScoreResponse:
        rollout = raw.get("rollout") if isinstance(raw, dict) else None
        rollout_id = rollout.get("id") if isinstance(rollout, dict) else None
        if not isinstance(raw, dict):
            return _invalid(None, f"items[{index}]: must be an object {{rollout, metadata}}")
        try:
            request = ScoreRequest.model_validate(
                {"include_breakdown": body.include_breakdown, **raw}
            )
            return await services.score(request)
        except ValidationError as exc:
            details = validation_details(list(exc.errors()), prefix=f"items[{index}]")
            reason = "; ".join(f"{d.field}: {d.message}" for d in details)
        except OversizeError as exc:
            reason = f"items[{index}].{exc.field}: {exc}"
        except OverloadedError as exc:
            return ScoreResponse(score=None, rubric_version=None, status="unscored",
                                 rollout_id=str(rollout_id) if rollout_id is not None else None,
                                 reason=f"overloaded: {exc}")
        log.warning("batch item %s invalid: %s", index, reason)
        return _invalid(rollout_id, reason)

    results = await asyncio.gather(*(one(i, raw) for i, raw in enumerate(body.items)))
    return BatchScoreResponse(results=list(results))


def _invalid(rollout_id: object, reason: str) -> ScoreResponse:
    return ScoreResponse(
        score=None,
        rubric_version=None,
        status="invalid",
        rollout_id=str(rollout_id) if rollout_id is not None else None,
        reason=reason,
    )
