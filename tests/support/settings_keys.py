"""The dotted keys of a settings model (``server.api_key``, ``pricing.<model>.prompt``), for
the configuration reference's test and for comparing two trees' configuration
(``bench.evaluations.surface``)."""

from __future__ import annotations

import types
from collections.abc import Collection
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, RootModel


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


def dotted_keys(
    model: type[BaseModel],
    prefix: str = "",
    agents: Collection[str] = (),
    also: Collection[str] = (),
) -> set[str]:
    """Every key of ``model``, walked recursively: mapping keys as ``<model>``, list items as
    ``[]``. A section with a field for each of ``agents`` lists those fields, and ``also``'s,
    once, as ``<agent>``; with no ``agents`` every key is spelled out."""
    names = set(model.model_fields)
    per_agent = bool(agents) and set(agents) <= names
    collapsed = {*agents, *also}
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        part = "<agent>" if per_agent and name in collapsed else name
        key = f"{prefix}{part}"
        keys.add(key)
        annotation = field.annotation
        origin = get_origin(annotation)
        if origin is dict:
            for inner in _models_in(get_args(annotation)[1]):
                keys |= dotted_keys(inner, f"{key}.<model>.", agents, also)
        elif origin is list:
            for inner in _models_in(get_args(annotation)[0]):
                keys |= dotted_keys(inner, f"{key}[].", agents, also)
        for inner in _models_in(annotation):
            keys |= dotted_keys(inner, f"{key}.", agents, also)
    return keys
