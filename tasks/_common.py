"""Helpers shared by the pipeline tasks (not tasks themselves)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from prefect.context import TaskRunContext
from pydantic import BaseModel

from amaris.agents.prompts import agent_messages
from amaris.rubric.model import RubricVersion
from amaris.steps.context import get_context
from amaris.steps.retry import digest

T = TypeVar("T", bound=BaseModel)


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


async def ask(agent: str, context: dict[str, Any], data: dict[str, Any], schema: type[T],
              step: int) -> T:
    """One structured call of ``agent``: its template and ``context`` (amaris's state that
    many calls share: the rubric, bounds) first, the per-call ``data`` last, so a provider's
    prefix cache serves the shared part (:func:`amaris.prompts.agent_messages`)."""
    ctx = get_context()
    return await ctx.gateway.structured(
        agent, agent_messages(agent, ctx.prompts[agent], context, data), schema, step=step)
