"""Retrieve history for the updater: static (recent steps) and dynamic (semantic)."""

from __future__ import annotations

import asyncio

from prefect import task
from prefect.cache_policies import NO_CACHE

from amaris.steps.context import get_context
from tasks.models import DynamicMemory, RetrievedMemory, StaticMemory


@task(name="retrieve-memory", cache_policy=NO_CACHE, task_run_name="retrieve-memory-{scope}")
async def retrieve_memory(step: int, scope: str, queries: list[str]) -> RetrievedMemory:
    """``static``: the last ``memory.static_memory_steps`` step summaries before ``step``;
    ``dynamic``: the top ``memory.dynamic_memory_limit_per_query`` documents per query,
    deduplicated, never from the current step."""
    ctx = get_context()
    settings = ctx.settings.memory
    recent, found = await asyncio.gather(
        asyncio.to_thread(ctx.memory.recent_summaries, scope, step, settings.static_memory_steps),
        asyncio.to_thread(
            ctx.memory.search_many,
            queries,
            limit=settings.dynamic_memory_limit_per_query,
            exclude_step=step,
            scope=scope,
            types=None,
        ),
    )
    static = [StaticMemory(step=d.step, type=d.type, text=d.text) for d in recent]
    dynamic: list[DynamicMemory] = []
    seen: set[str] = set()
    for query, hits in zip(queries, found, strict=True):
        for hit in hits:
            if hit.id in seen:
                continue
            seen.add(hit.id)
            dynamic.append(
                DynamicMemory(
                    type=hit.document.type,
                    step=hit.document.step,
                    text=hit.document.text,
                    score=round(hit.score, 4),
                    query=query,
                )
            )
    return RetrievedMemory(static=static, dynamic=dynamic, queries=queries)
