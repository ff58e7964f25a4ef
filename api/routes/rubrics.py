"""``GET /rubrics``: the rubric in force; ``GET /rubrics/history``: every version."""

from fastapi import APIRouter

from amaris.models import RubricPublic
from api.deps import ServicesDep
from api.errors import AUTH_ERRORS as _ERRORS

router = APIRouter(tags=["rubrics"])


@router.get("/rubrics", response_model=RubricPublic, responses=_ERRORS)
async def current_rubric(services: ServicesDep) -> RubricPublic:
    """Anchors and adaptive criteria with ids and weights, and the version."""
    return services.store.current().public()


@router.get("/rubrics/history", response_model=list[RubricPublic], responses=_ERRORS)
async def rubric_history(services: ServicesDep) -> list[RubricPublic]:
    """Every rubric version, oldest first."""
    import asyncio

    versions = await asyncio.to_thread(services.store.history)
    return [v.public() for v in versions]
