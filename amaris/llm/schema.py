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
from typing import Literal, TypedDict

from pydantic import BaseModel

from amaris.jsonfile import JSONDict

JsonScalar = str | int | float | bool | None
"""A JSON value that is not an array or an object (an enumeration's option)."""


class SchemaNode(TypedDict, total=False):
    """A strict JSON schema, or one node of it: the keywords :func:`strict_schema` keeps
    (:data:`_KEPT`), each of its JSON type. Bounds may be integers or reals (an ``int``
    is a ``float`` here)."""

    type: str | list[str]
    properties: dict[str, SchemaNode]
    required: list[str]
    additionalProperties: bool
    items: SchemaNode
    enum: list[JsonScalar]
    const: JsonScalar
    anyOf: list[SchemaNode]
    minimum: float
    maximum: float
    exclusiveMinimum: float
    exclusiveMaximum: float
    multipleOf: float
    minLength: int
    maxLength: int
    minItems: int
    maxItems: int


_Copied = Literal[
    "type",
    "required",
    "additionalProperties",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
]
_COPIED: dict[str, _Copied] = {
    "type": "type",
    "required": "required",
    "additionalProperties": "additionalProperties",
    "enum": "enum",
    "const": "const",
    "minimum": "minimum",
    "maximum": "maximum",
    "exclusiveMinimum": "exclusiveMinimum",
    "exclusiveMaximum": "exclusiveMaximum",
    "multipleOf": "multipleOf",
    "minLength": "minLength",
    "maxLength": "maxLength",
    "minItems": "minItems",
    "maxItems": "maxItems",
}
"""The kept keywords whose values are copied as they are (the others hold schemas)."""
_KEPT = frozenset({*_COPIED, "properties", "items", "anyOf"})
"""Keywords kept: those OpenAI strict mode documents, and vLLM's and llama.cpp's grammars
(xgrammar) understand. String lengths (``minLength``, ``maxLength``) and array lengths
(``minItems``, ``maxItems``) are kept: OpenAI's strict mode accepts them (except for
fine-tuned models, whose ``400`` naming the schema sends the endpoint to the
``json_object`` fallback), and a constrained decoder then cannot emit an empty
``memory_entry.text`` that validation would refuse. Everything else (titles, descriptions,
defaults, patterns, formats) is dropped: the model's own validation still checks it after
parsing."""


@cache
def strict_schema(model: type[BaseModel]) -> SchemaNode:
    """The strict-mode JSON schema of ``model``'s output (validation mode).

    Cached per model; callers that change it must copy it first (:func:`copy.deepcopy`).
    """
    schema = model.model_json_schema(mode="validation")
    definitions = schema.get("$defs", {})

    # A node of pydantic's JSON schema as it writes it: any keyword, $ref among them.
    def strict(node: JSONDict, seen: tuple[str, ...]) -> SchemaNode:
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if name in seen:
                raise ValueError(f"recursive schema {name!r} cannot be inlined")
            return strict(definitions[name], (*seen, name))
        out: SchemaNode = {}
        for key, value in node.items():
            copied = _COPIED.get(key)
            if copied is not None:
                out[copied] = copy.deepcopy(value)
            elif key == "properties":
                out["properties"] = {name: strict(sub, seen) for name, sub in value.items()}
            elif key == "items":
                out["items"] = strict(value, seen)
            elif key == "anyOf":
                out["anyOf"] = [strict(branch, seen) for branch in value]
        if "properties" in out or out.get("type") == "object":
            out["type"] = "object"
            out.setdefault("properties", {})
            out["required"] = list(out["properties"])
            out["additionalProperties"] = False
        return out

    return strict(schema, ())
