"""``POST /score`` and ``POST /batch_score``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import ValidationError

from amaris.logs import loggable
from amaris.models import (
    BatchScoreRequest,
    BatchScoreResponse,
    ScoreRequest,
    ScoreResponse,
    valid_text,
)
from amaris.scoring.reward import score_rollout
from amaris.scoring.rollout_ids import RolloutConflictError
from amaris.scoring.rules import RuleInputError
from amaris.scoring.scorer import OverloadedError, OversizeError
from amaris.services import Services
from amaris.steps.coordinator import StepRefusedError
from api.deps import ServicesDep
from api.errors import CONFLICT_ERRORS, STEP_ERRORS, validation_details
from api.errors import INPUT_ERRORS as _ERRORS

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
            "database. Nothing was stored; retry after Retry-After.",
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
    result = await _score_rollout(body, services)
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
    changes nothing; the other items are scored normally.
    """
    admit_batch("items", len(body.items), services)
    checked = [
        check_item(i, raw, body.include_breakdown, services) for i, raw in enumerate(body.items)
    ]
    return BatchScoreResponse(results=await score_items(checked, services))


def admit_batch(field: str, size: int, services: Services) -> None:
    """Refuse a batch of ``size`` items (named ``field``) over the batch or queue bounds.

    Raises:
        OversizeError: more than ``server.max_batch_items``.
        OverloadedError: the judge calls pending and these would pass
            ``scoring.max_pending``.
    """
    max_items = services.settings.server.max_batch_items
    if size > max_items:
        raise OversizeError(field, size, max_items, unit="items")
    limit = services.settings.scoring.max_pending
    if limit is not None and services.scorer.pending + size > limit:
        raise OverloadedError(
            f"{services.scorer.pending} judge calls pending and "
            f"{size} more asked (max_pending {limit})"
        )


def check_item(
    index: int, raw: object, include_breakdown: bool, services: Services
) -> ScoreRequest | ScoreResponse:
    """Item ``index`` of a batch as a request to score, or its ``invalid`` answer.

    The checks of ``/score`` (the body's validation, :meth:`Scorer.check`), without side
    effects.
    """
    rollout_id = _raw_id(raw)
    if not isinstance(raw, dict):
        return _invalid(index, None, f"items[{index}]: must be an object {{rollout, metadata}}")
    try:
        request = ScoreRequest.model_validate({"include_breakdown": include_breakdown, **raw})
        services.scorer.check(request)
    except ValidationError as exc:
        details = validation_details(list(exc.errors()), prefix=f"items[{index}]")
        return _invalid(index, rollout_id, "; ".join(f"{d.field}: {d.message}" for d in details))
    except (OversizeError, RuleInputError) as exc:
        return _invalid(index, rollout_id, f"items[{index}].{exc.field}: {exc}")
    return request


async def _score_rollout(request: ScoreRequest, services: Services) -> ScoreResponse:
    """:func:`~amaris.scoring.reward.score_rollout` with this service's parts."""
    return await score_rollout(
        request,
        scopes=services.scopes,
        scorer=services.scorer,
        coordinator=services.coordinator,
        ids=services.ids,
        sync=services.settings.pipeline.mode == "sync",
    )


async def score_items(
    checked: Sequence[ScoreRequest | ScoreResponse], services: Services
) -> list[ScoreResponse]:
    """Score the requests among ``checked`` concurrently; answers in order (an answer
    in ``checked`` is kept)."""

    async def one(index: int, request: ScoreRequest) -> ScoreResponse:
        try:
            return await _score_rollout(request, services)
        except (RolloutConflictError, StepRefusedError, RuleInputError) as exc:
            return _invalid(index, request.rollout.id, f"items[{index}].{exc.field}: {exc}")
        except OverloadedError as exc:
            return ScoreResponse(
                score=None,
                rubric_version=None,
                status="unscored",
                rollout_id=request.rollout.id,
                reason=f"overloaded: {exc}",
            )

    pending = [one(i, item) for i, item in enumerate(checked) if isinstance(item, ScoreRequest)]
    scored = iter(await asyncio.gather(*pending))
    return [next(scored) if isinstance(item, ScoreRequest) else item for item in checked]


def _raw_id(raw: object) -> str | None:
    """The rollout id of an item that may not validate, if it can be shown as one."""
    rollout = raw.get("rollout") if isinstance(raw, dict) else None
    rollout_id = rollout.get("id") if isinstance(rollout, dict) else None
    if not isinstance(rollout_id, str | int) or isinstance(rollout_id, bool):
        return None
    text = str(rollout_id)
    try:
        return valid_text(text) if len(text) <= 512 else None
    except ValueError:
        return None


def _invalid(index: int, rollout_id: str | None, reason: str) -> ScoreResponse:
    log.warning("batch item %s invalid: %s", index, loggable(reason, limit=1000))
    return ScoreResponse(
        score=None,
        rubric_version=None,
        status="invalid",
        rollout_id=rollout_id,
        reason=reason,
    )
