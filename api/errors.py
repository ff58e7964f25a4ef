"""Every error answers ``{"error", "detail": [{"field", "message"}]}`` and is logged."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from amaris.jsonfile import JSONDict
from amaris.logs import loggable
from amaris.memory.storage_health import StorageUnavailableError
from amaris.models import ErrorDetail, ErrorResponse
from amaris.scoring.batch import bounded_path, render_path
from amaris.scoring.refusals import OverloadedError, OversizeError
from amaris.scoring.rollout_ids import RolloutConflictError
from amaris.scoring.rules import RuleInputError
from amaris.steps.coordinator import StepRefusedError
from amaris.trust.audit.pause import ScoringPausedError

log = logging.getLogger("amaris.api")


class BodyError(HTTPException):
    """The request body refused while it streams in: 413 over ``server.max_body_bytes``,
    408 not whole within ``server.body_timeout_seconds``.

    Raised by the body's receive channel (:class:`api.middleware.RequestGuard`) into the
    handler reading the body; FastAPI re-raises an ``HTTPException`` from its body read,
    so the app's handler answers it, with the field ``body``.
    """


Responses = dict[int | str, JSONDict]
"""OpenAPI response objects by status: the type of FastAPI's ``responses=`` parameter."""

AUTH_ERRORS: Responses = {
    401: {"model": ErrorResponse, "description": "Missing or wrong bearer key."},
}
"""OpenAPI responses of every protected route."""

INPUT_ERRORS: Responses = {
    **AUTH_ERRORS,
    413: {"model": ErrorResponse, "description": "Body or a rollout field too large."},
    422: {"model": ErrorResponse, "description": "Invalid input; `detail` names each field."},
    429: {"model": ErrorResponse, "description": "Too much judge work queued; see Retry-After."},
}
"""OpenAPI responses of protected routes that take input."""

STEP_ERRORS: Responses = {
    409: {
        "model": ErrorResponse,
        "description": "The step is refused in the current state: "
        "`pipeline.max_open_steps` steps are open, or (`/complete`) the step has no "
        "rollouts and is not the next step.",
    },
    422: {
        "model": ErrorResponse,
        "description": "Invalid input; `detail` names each field "
        "(a step past `pipeline.max_step` or `pipeline.max_steps_ahead` included).",
    },
}
"""OpenAPI responses of routes that take a step number which may open or complete a step."""

_STEP_REFUSALS = {
    "out_of_range": (422, "invalid_request"),
    "too_many_open": (409, "too_many_open_steps"),
    "not_next": (409, "nothing_to_complete"),
}


STORAGE_ERRORS: Responses = {
    503: {
        "model": ErrorResponse,
        "description": "A durable write failed (full disk, locked or read-only database): "
        "nothing was stored or changed; retry after Retry-After. `/healthz` says why.",
    },
}
"""OpenAPI responses of routes that write the rollout log or the step registry."""

CONFLICT_ERRORS: Responses = {
    409: {
        "model": ErrorResponse,
        "description": "The rollout id is already in its step with other content.",
    },
}
"""OpenAPI responses of the route that logs one rollout per request."""


def field_name(loc: tuple[Any, ...] | list[Any], prefix: str = "") -> str:
    """``("body", "rollout", "output")`` -> ``rollout.output``; list indexes as ``[i]``.

    A part that came from the body (an unknown key) is cut to 100 characters, and a lone
    surrogate in it escaped: the name is sent back in a JSON body and logged.
    """
    parts = list(loc)
    while not prefix and parts and parts[0] == "body":
        del parts[0]
    return render_path(bounded_path(parts), prefix) or "body"


def _detail(err: Any, prefix: str) -> ErrorDetail:
    if err.get("type") == "json_invalid":
        # FastAPI locates a JSON syntax error as ("body", <character offset>): the field is
        # the whole body, not an item "[offset]".
        loc = err.get("loc", ())
        where = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
        problem = (err.get("ctx") or {}).get("error")
        reason = f": {problem}" if problem else ""
        return ErrorDetail(field=prefix or "body", message=f"body is not valid JSON{reason}{where}")
    return ErrorDetail(field=field_name(err.get("loc", ()), prefix), message=str(err.get("msg")))


def validation_details(errors: list[Any], prefix: str = "") -> list[ErrorDetail]:
    """Pydantic/FastAPI errors as field-named details."""
    return [_detail(err, prefix) for err in errors]


def error_response(
    status_code: int, error: str, detail: list[ErrorDetail], headers: dict[str, str] | None = None
) -> JSONResponse:
    """A JSON error body."""
    body = ErrorResponse(error=error, detail=detail)
    return JSONResponse(jsonable_encoder(body), status_code=status_code, headers=headers)


def step_refused(exc: StepRefusedError, field: str | None = None) -> JSONResponse:
    """The answer to a refused step (its ``field``, or the one the error names)."""
    status, error = _STEP_REFUSALS[exc.reason]
    return error_response(status, error, [ErrorDetail(field=field or exc.field, message=str(exc))])


def install(app: FastAPI) -> None:
    """Register the handlers."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = validation_details(list(exc.errors()))
        log.warning(
            "422 %s %s: %s",
            request.method,
            loggable(request.url.path),
            loggable("; ".join(f"{d.field}: {d.message}" for d in detail), limit=1000),
        )
        return error_response(422, "invalid_request", detail)

    refused = {"count": 0, "logged_at": 0.0}

    @app.exception_handler(OverloadedError)
    async def _overloaded(request: Request, exc: OverloadedError) -> JSONResponse:
        retry_after = request.app.state.services.settings.scoring.retry_after_seconds
        # Under overload every refusal would be a log line (hundreds a second): log the
        # first, then one summary every 10 s. /metrics counts each one.
        refused["count"] += 1
        now = time.monotonic()
        if now - refused["logged_at"] >= 10:
            log.warning(
                "429 %s %s: %s (%d refused since the last report)",
                request.method,
                loggable(request.url.path),
                exc,
                refused["count"],
            )
            refused.update(count=0, logged_at=now)
        return error_response(
            429,
            "overloaded",
            [ErrorDetail(field="scoring.max_pending", message=f"{exc}; retry later")],
            headers={"Retry-After": str(retry_after)},
        )

    paused = {"logged_at": 0.0}

    @app.exception_handler(ScoringPausedError)
    async def _paused(request: Request, exc: ScoringPausedError) -> JSONResponse:
        # A trainer may retry in a loop: one log line every 10 s, not one per refusal.
        now = time.monotonic()
        if now - paused["logged_at"] >= 10:
            log.warning("503 %s %s: %s", request.method, loggable(request.url.path), exc)
            paused["logged_at"] = now
        retry_after = request.app.state.services.settings.scoring.retry_after_seconds
        return error_response(
            503,
            "scoring_paused",
            [ErrorDetail(field="audit", message=str(exc))],
            headers={"Retry-After": str(retry_after)},
        )

    @app.exception_handler(StorageUnavailableError)
    async def _storage(request: Request, exc: StorageUnavailableError) -> JSONResponse:
        # Logged (once per outage) where it was recorded: amaris.memory.storage_health.
        retry_after = request.app.state.services.settings.scoring.retry_after_seconds
        return error_response(
            503,
            "storage_unavailable",
            [
                ErrorDetail(
                    field="storage",
                    message=f"{exc}; nothing was stored or changed, retry later",
                )
            ],
            headers={"Retry-After": str(retry_after)},
        )

    @app.exception_handler(StepRefusedError)
    async def _step_refused(request: Request, exc: StepRefusedError) -> JSONResponse:
        log.warning(
            "%s %s %s: %s: %s",
            _STEP_REFUSALS[exc.reason][0],
            request.method,
            loggable(request.url.path),
            exc.field,
            exc,
        )
        return step_refused(exc)

    @app.exception_handler(OversizeError)
    async def _oversize(request: Request, exc: OversizeError) -> JSONResponse:
        log.warning(
            "413 %s %s: %s", request.method, loggable(request.url.path), loggable(exc, limit=1000)
        )
        return error_response(
            413, "payload_too_large", [ErrorDetail(field=exc.field, message=str(exc))]
        )

    @app.exception_handler(RuleInputError)
    async def _rule_input(request: Request, exc: RuleInputError) -> JSONResponse:
        log.warning("422 %s %s: %s", request.method, loggable(request.url.path), exc)
        return error_response(
            422, "invalid_request", [ErrorDetail(field=exc.field, message=str(exc))]
        )

    @app.exception_handler(RolloutConflictError)
    async def _conflict(request: Request, exc: RolloutConflictError) -> JSONResponse:
        # The message quotes the id escaped and bounded (amaris.logs.loggable).
        log.warning("409 %s %s: %s", request.method, loggable(request.url.path), exc)
        return error_response(409, "conflict", [ErrorDetail(field=exc.field, message=str(exc))])

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        log.warning(
            "%s %s %s: %s", exc.status_code, request.method, loggable(request.url.path), exc.detail
        )
        names = {
            401: "unauthorized",
            404: "not_found",
            405: "method_not_allowed",
            408: "request_timeout",
            413: "payload_too_large",
        }
        field = (
            "Authorization"
            if exc.status_code == 401
            else "body"
            if isinstance(exc, BodyError)
            else "path"
        )
        return error_response(
            exc.status_code,
            names.get(exc.status_code, "http_error"),
            [ErrorDetail(field=field, message=str(exc.detail))],
            headers=dict(exc.headers) if exc.headers else None,
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette's ServerErrorMiddleware calls this for any unhandled exception (and then
        # re-raises it, so it is still logged with its traceback by the server).
        log.error(
            "500 %s %s: %s: %s", request.method, loggable(request.url.path), type(exc).__name__, exc
        )
        return error_response(
            500, "internal_error", [ErrorDetail(field="server", message="internal server error")]
        )
