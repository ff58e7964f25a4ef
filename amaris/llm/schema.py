"""JSON schemas for structured outputs, in the subset every strict decoder accepts.

OpenAI's strict mode (and vLLM, SGLang, Ollama, llama.cpp grammars) accept only part of
JSON Schema: every object lists all its properties as required and forbids others, and
keywords such as ``default``, ``title`` or ``$ref`` are refused by some of them.
:func:`strict_schema` turns a pydantic model's schema into that subset: references
inlined, every object closed and fully required, only the keywords below kept.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any, TypeAlias

from pydantic import BaseModel

from amaris.jsonfile import JSONDict

JsonSchema: TypeAlias = JSONDict
"""A JSON schema (or one node of it): JSON of unknown shape is the point (any keyword,
nested to any depth), so it is a plain JSON object."""

_KEPT = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
    }
)
"""Keywords kept: those OpenAI strict mode documents, and vLLM's and llama.cpp's grammars
(xgrammar) understand. String lengths (``minLength``, ``maxLength``) and array lengths
(``minItems``, ``maxItems``) are kept: OpenAI's strict mode accepts them since May 2025
(except for fine-tuned models, whose ``400`` naming the schema sends the endpoint to the
``json_object`` fallback), and a constrained decoder then cannot emit an empty
``memory_entry.text`` that validation would refuse. Everything else (titles, descriptions,
defaults, patterns, formats) is dropped: the model's own validation still checks it after
parsing."""


@cache
def strict_schema(model: type[BaseModel]) -> JsonSchema:
    """The strict-mode JSON schema of ``model``'s output (validation mode).

    Cached per model; callers that change it must copy it first (:func:`copy.deepcopy`).
    """
    schema = model.model_json_schema(mode="validation")
    definitions: JsonSchema = schema.get("$defs", {})
    strict: JsonSchema = _strict(schema, definitions, ())
    return strict


def _strict(node: Any, definitions: JsonSchema, seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_strict(item, definitions, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            raise ValueError(f"recursive schema {name!r} cannot be inlined")
        return _strict(definitions[name], definitions, (*seen, name))
    out: JsonSchema = {}
    for key, value in node.items():
        if key not in _KEPT:
            continue
        if key == "properties":
            out[key] = {name: _strict(sub, definitions, seen) for name, sub in value.items()}
        elif key in ("items", "anyOf"):
            out[key] = _strict(value, definitions, seen)
        else:
            out[key] = copy.deepcopy(value)
    if "properties" in out or out.get("type") == "object":
        out["type"] = "object"
        out.setdefault("properties", {})
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out
