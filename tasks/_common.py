"""Helpers shared by the pipeline tasks (not tasks themselves)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from prefect.context import TaskRunContext
from pydantic import BaseModel

from amaris.llm.budget import estimate_messages, estimate_tokens, split_by_budget
from amaris.pipeline.context import get_context
from amaris.pipeline.retry import digest
from amaris.prompts import data_message
from amaris.rubric import RubricVersion

T = TypeVar("T", bound=BaseModel)
Item = TypeVar("Item")


def criteria_payload(rubric: RubricVersion) -> list[dict[str, Any]]:
    """The rubric as agents see it."""
    return [
        {
            "id": c.id,
            "text": c.text,
            "weight": c.weight,
            "kind": "pitfall" if c.weight < 0 else "requirement",
            "is_anchor": c.is_anchor,
        }
        for c in rubric.criteria
    ]


def cache_key(agent: str) -> Callable[[TaskRunContext, dict[str, Any]], str]:
    """A task cache key: the data folder, every parameter, and the agent's prompt and model
    fingerprint, so a re-run reuses a result only when nothing it depends on changed."""

    def key(context: TaskRunContext, params: dict[str, Any]) -> str:
        ctx = get_context()
        return f"{agent}-" + digest(ctx.namespace, params, ctx.prompt_fingerprint(agent))

    return key


async def ask(agent: str, payload: dict[str, Any], schema: type[T], step: int) -> T:
    """One structured call of ``agent``: its template as instructions, ``payload`` as data."""
    ctx = get_context()
    return await ctx.gateway.structured(
        agent,
        [{"role": "system", "content": ctx.prompts[agent]},
         {"role": "user", "content": data_message(agent, payload)}],
        schema,
        step=step,
    )


def prompt_tokens(agent: str, payload: dict[str, Any]) -> int:
    """Estimated prompt tokens of :func:`ask`'s request for ``agent`` with ``payload``."""
    ctx = get_context()
    return estimate_messages([{"role": "system", "content": ctx.prompts[agent]},
                              {"role": "user", "content": data_message(agent, payload)}])


def item_tokens(item: Any) -> int:
    """Estimated tokens an item adds to a data message's JSON list."""
    return estimate_tokens(json.dumps(item, ensure_ascii=False)) + 1


async def split_for(agent: str, payload: dict[str, Any], field: str, items: Sequence[Item],
                    max_count: int | None = None) -> list[list[Item]]:
    """``items`` in consecutive parts, each small enough that ``payload`` with the part as
    its ``field`` fits ``agent``'s context budget, and of at most ``max_count`` items.

    With the agent's context window unknown, only ``max_count`` bounds a part.
    """
    budget = await get_context().gateway.prompt_budget(agent)
    if budget is None:
        return split_by_budget(items, item_tokens, None, max_count)
    room = budget - prompt_tokens(agent, {**payload, field: []})
    return split_by_budget(items, item_tokens, room, max_count)
