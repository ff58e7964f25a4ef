"""``GET /rubrics``: the rubric in force; ``/rubrics/history``: every version;
``/rubrics/diff``: what changed between two versions; ``/rubrics/stats``: how informative
each criterion was in a step; ``/rubrics/{version}``: one version."""

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from amaris.memory.rollout_log import step_records
from amaris.models import ErrorDetail, ErrorResponse, RubricPublic
from amaris.rubric.diff import RubricDiff, diff_rubrics
from amaris.rubric.informativeness import ScopeStats, step_stats
from amaris.rubric.model import RubricVersion
from amaris.rubric.store import RubricStore, RubricStoreError
from api.deps import ServicesDep
from api.errors import AUTH_ERRORS as _ERRORS
from api.errors import INPUT_ERRORS, Responses, error_response

router = APIRouter(tags=["rubrics"])
log = logging.getLogger("amaris.api")

_LOOKUP_ERRORS: Responses = {
    **_ERRORS,
    404: {"model": ErrorResponse, "description": "No rubric version of that number."},
    422: INPUT_ERRORS[422],
}


@router.get("/rubrics", response_model=RubricPublic, responses=_ERRORS)
async def current_rubric(services: ServicesDep) -> RubricPublic:
    """Anchors and adaptive criteria with ids and weights, and the version."""
    return services.store.current().public()


@router.get("/rubrics/history", response_model=list[RubricPublic], responses=_ERRORS)
async def rubric_history(services: ServicesDep) -> list[RubricPublic]:
    """Every rubric version, oldest first."""
    versions = await asyncio.to_thread(services.store.history)
    return [v.public() for v in versions]


def _read(
    store: RubricStore, wanted: dict[str, int]
) -> tuple[dict[str, RubricVersion], list[ErrorDetail]]:
    """The wanted versions by field name, and a detail naming each field that has none."""
    found: dict[str, RubricVersion] = {}
    missing: list[ErrorDetail] = []
    for field, version in wanted.items():
        try:
            found[field] = store.get(version)
        except RubricStoreError as exc:
            missing.append(ErrorDetail(field=field, message=str(exc)))
    return found, missing


def _not_found(path: str, missing: list[ErrorDetail]) -> JSONResponse:
    log.warning("404 GET %s: %s", path, "; ".join(f"{d.field}: {d.message}" for d in missing))
    return error_response(404, "not_found", missing)


# Before /rubrics/{version}, which would otherwise take "diff" for a version number.
@router.get("/rubrics/diff", response_model=RubricDiff, responses=_LOOKUP_ERRORS)
async def rubric_diff(
    services: ServicesDep,
    a: Annotated[int, Query(ge=1, description="The older version.")],
    b: Annotated[int, Query(ge=1, description="The newer version.")],
) -> RubricDiff | JSONResponse:
    """Criteria added, removed and changed (text or weight) from version a to b.

    Anchors never change within a lineage; `anchors_changed` is true only across
    `amaris rubrics init`.
    """
    found, missing = await asyncio.to_thread(_read, services.store, {"a": a, "b": b})
    if missing:
        return _not_found("/rubrics/diff", missing)
    return diff_rubrics(found["a"], found["b"])


class RubricStats(BaseModel):
    """Answer of ``GET /rubrics/stats``."""

    step: int
    scopes: list[ScopeStats] = Field(
        description="Per scope, each criterion's verdict statistics over the step's scored "
        "rollouts (a rollout id sent twice counts once; late ones are left out)."
    )


_STATS_ERRORS: Responses = {
    **_ERRORS,
    404: {"model": ErrorResponse, "description": "No step of that number, or no such scope."},
    422: INPUT_ERRORS[422],
}


# Before /rubrics/{version}, which would otherwise take "stats" for a version number.
@router.get("/rubrics/stats", response_model=RubricStats, responses=_STATS_ERRORS)
async def rubric_stats(
    services: ServicesDep,
    step: Annotated[int, Query(ge=0, description="Training step.")],
    scope: Annotated[
        str | None, Query(min_length=1, max_length=4096, description="Only this scope.")
    ] = None,
) -> RubricStats | JSONResponse:
    """How informative each criterion was in a step: mean, variance, share of verdicts at
    the scale's ends, share of groups (same prompt) with zero spread, correlation with the
    reward, and whether it was saturated or flat (docs/pipeline.md). Computed from
    the rollout log, so an open step shows its rollouts so far."""
    if services.coordinator.status(step) is None:
        return _not_found(
            "/rubrics/stats", [ErrorDetail(field="step", message=f"step {step} is unknown")]
        )
    scopes = await asyncio.to_thread(
        lambda: step_stats(step_records(services.rollouts, services.settings.memory.path, step))
    )
    if scope is not None:
        scopes = [s for s in scopes if s.scope == scope]
        if not scopes:
            return _not_found(
                "/rubrics/stats",
                [ErrorDetail(field="scope", message=f"no scored rollout of scope {scope!r}")],
            )
    return RubricStats(step=step, scopes=scopes)


@router.get("/rubrics/{version}", response_model=RubricPublic, responses=_LOOKUP_ERRORS)
async def rubric_version(
    services: ServicesDep, version: Annotated[int, Path(ge=1, description="Version number.")]
) -> RubricPublic | JSONResponse:
    """One rubric version, in force or not."""
    found, missing = await asyncio.to_thread(_read, services.store, {"version": version})
    if missing:
        return _not_found(f"/rubrics/{version}", missing)
    return found["version"].public()
