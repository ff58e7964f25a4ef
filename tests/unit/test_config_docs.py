"""docs/configuration.md documents every settings field, by its dotted key."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, RootModel

from amaris.settings import AGENTS, AUDITOR, Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds directly (``X | None``); a ``RootModel`` is
    a value (``ProviderJSON``: the provider's JSON), not a section of keys."""
    if isinstance(annotation, type) and issubclass(annotation, RootModel):
        return []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for arg in get_args(annotation) for m in _models_in(arg)]
    return []


def dotted_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key of ``model``, walked recursively: per-agent sections (``default``, the six
    agents and the auditor) as ``<agent>``, mapping keys as ``<model>``, list items as
    ``[]``."""
    names = set(model.model_fields)
    per_agent = set(AGENTS) <= names
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        part = "<agent>" if per_agent and name in {"default", *AGENTS, AUDITOR} else name
        key = f"{prefix}{part}"
        keys.add(key)
        annotation = field.annotation
        origin = get_origin(annotation)
        if origin is dict:
            for inner in _models_in(get_args(annotation)[1]):
                keys |= dotted_keys(inner, f"{key}.<model>.")
        elif origin is list:
            for inner in _models_in(get_args(annotation)[0]):
                keys |= dotted_keys(inner, f"{key}[].")
        for inner in _models_in(annotation):
            keys |= dotted_keys(inner, f"{key}.")
    return keys


def test_the_walk_finds_nested_and_per_agent_keys() -> None:
    keys = dotted_keys(Settings)
    assert {
        "server.api_key",
        "client.<agent>.base_url",
        "agents.<agent>.model",
        "concurrency.<agent>",
        "pricing.<model>.prompt",
        "anchor_rubrics[].text",
        "memory.rollout_retention_steps",
    } <= keys
    assert not any("scorer" in key for key in keys)


def test_every_settings_field_is_documented() -> None:
    documented = set(re.findall(r"`([^`\s]+)`", DOC.read_text(encoding="utf-8")))
    missing = sorted(dotted_keys(Settings) - documented)
    assert missing == [], f"{len(missing)} keys not in docs/configuration.md: {missing}"
