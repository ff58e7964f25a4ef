"""Helpers shared by the pipeline tasks (not tasks themselves)."""

from __future__ import annotations

from typing import Any

from amaris.rubric import RubricVersion


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


def messages(system: str, user: str) -> list[dict[str, str]]:
    """A system + user chat."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
