"""``GET /memory/inspect``: what the digest holds; ``GET /memory/search``: semantic search."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query

from amaris.memory.inspection import (
    MAX_RECENT,
    MAX_SEARCH_LIMIT,
    MemoryInspection,
    MemorySearchHit,
    inspect_memory,
    search_memory,
)
from amaris.memory.models import DocType
from api.deps import ServicesDep
from api.errors import AUTH_ERRORS, INPUT_ERRORS, Responses

router = APIRouter(tags=["memory"])

_ERRORS: Responses = {**AUTH_ERRORS, 422: INPUT_ERRORS[422]}


@router.get("/memory/inspect", response_model=MemoryInspection, responses=_ERRORS)
async def memory_inspect(
    services: ServicesDep,
    recent: Annotated[
        int, Query(ge=0, le=MAX_RECENT, description="Latest documents to list.")
    ] = 20,
) -> MemoryInspection:
    """Documents per step, per type and step, and the latest documents (text cut to 300).

    Scrolls the whole digest: an inspection tool, not for the training loop.
    """
    return await asyncio.to_thread(inspect_memory, services.memory, recent)


@router.get("/memory/search", response_model=list[MemorySearchHit], responses=_ERRORS)
async def memory_search(
    services: ServicesDep,
    q: Annotated[str, Query(min_length=1, max_length=2000, description="Free text.")],
    limit: Annotated[int, Query(ge=1, le=MAX_SEARCH_LIMIT, description="Most hits.")] = 5,
    doc_type: Annotated[
        DocType | None, Query(alias="type", description="Only this document type.")
    ] = None,
    scope: Annotated[str | None, Query(description="Only this scope.")] = None,
) -> list[MemorySearchHit]:
    """The digest documents most similar to ``q``, best first, with their similarity."""
    return await asyncio.to_thread(
        search_memory, services.memory, q, limit=limit, doc_type=doc_type, scope=scope
    )
