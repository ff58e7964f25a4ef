"""What a request that carries no JSON schema tells the model about its reply's shape.

Under ``json_schema`` the endpoint's decoder holds the reply to the agent's schema, and the
prompt is sent as written. Under ``json_object`` (a fallback, or configured) the decoder
only keeps the reply JSON, and under ``none`` nothing does: a small or older judge then
answers valid JSON of its own shape. In those two modes the system message ends with
:func:`format_instructions`: one filled example of the exact reply expected (the caller's,
such as the scorer's verdicts with the rubric's own criterion ids, else
:func:`example_of` the agent's schema). An example, not the schema: a small model shown
a JSON schema tends to copy it (answering ``{"properties": {...}}``), while it follows an
example's shape. The section depends on the
schema (or example) alone, so the system message stays byte-identical from call to call
for a provider's prefix cache.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from pydantic import BaseModel

from amaris.llm.schema import SchemaNode

FORMAT_HEADING = "Your reply must be one JSON object of exactly this shape (your own values):"
"""The line before the example (no data block follows it: the example is amaris's own)."""
SHOWN_MODES = frozenset({"json_object", "none"})
"""The structured-output modes whose requests show the example (they send no schema)."""
_EXAMPLES = 256
"""Examples kept (:class:`Examples`): one per schema object."""


def example_of(schema: SchemaNode) -> Any:
    """One value of ``schema`` (a strict schema, :func:`~amaris.llm.schema.strict_schema`):
    every property in order; a list with ``minItems`` items (at least one); of an
    enumeration, the item's position in its list picks the option (distinct ids in a list
    of them), of a number the middle of its bounds; a free string ``<name>`` of its
    property (``...`` in a list)."""
    return _example(schema, "...", 0)


def _example(node: SchemaNode, name: str, index: int) -> Any:
    if "const" in node:
        return node["const"]
    if node.get("enum"):
        options = node["enum"]
        return options[index % len(options)]
    if node.get("anyOf"):
        return _example(node["anyOf"][0], name, index)
    kind = node.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object":
        properties = node.get("properties", {})
        return {key: _example(sub, f"<{key}>", index) for key, sub in properties.items()}
    if kind == "array":
        count = max(1, int(node.get("minItems", 1)))
        return [_example(node.get("items", {}), "...", i) for i in range(count)]
    if kind in ("integer", "number"):
        low = _bound(node, False, 0.0)
        middle = (low + _bound(node, True, low)) / 2
        return int(middle) if kind == "integer" else middle
    if kind == "boolean":
        return True
    if kind == "string":
        return name
    return None


def shown_example(example: BaseModel) -> str:
    """``example``'s JSON as the model is shown it: one line, a space after ``,`` and
    ``:`` (as models write JSON), non-ASCII text as written."""
    return json.dumps(example.model_dump(mode="json"), ensure_ascii=False)


def _bound(node: SchemaNode, high: bool, default: float) -> float:
    """``node``'s upper (``high``) or lower bound, inclusive or not; else ``default``."""
    if high:
        value = node.get("maximum", node.get("exclusiveMaximum"))
    else:
        value = node.get("minimum", node.get("exclusiveMinimum"))
    return float(value) if isinstance(value, int | float) else default


def format_instructions(example: str) -> str:
    """The section that ends the system message: :data:`FORMAT_HEADING`, then ``example``
    (the JSON of one reply) on one line."""
    return f"{FORMAT_HEADING}\n{example}"


def with_instructions(messages: list[dict[str, str]], section: str) -> list[dict[str, str]]:
    """``messages`` with ``section`` after the first system message's text (a system
    message of its own first when there is none); ``messages`` itself is not changed."""
    for position, message in enumerate(messages):
        if message.get("role") == "system":
            content = f"{message.get('content', '').rstrip()}\n\n{section}"
            return [
                *messages[:position],
                {**message, "content": content},
                *messages[position + 1 :],
            ]
    return [{"role": "system", "content": section}, *messages]


class Examples:
    """:func:`example_of`'s JSON, once per schema object (the scorer's per-rubric schemas
    and the agents' cached ones are the same object call after call); shared by threads."""

    def __init__(self) -> None:
        self._examples: dict[int, tuple[SchemaNode, str]] = {}
        self._lock = threading.Lock()

    def of(self, schema: SchemaNode) -> str:
        """The JSON of :func:`example_of` ``schema``, compact but for spaces after ``,``
        and ``:`` (as a model writes JSON)."""
        with self._lock:
            cached = self._examples.get(id(schema))
        # The entry holds the schema itself: its id cannot be reused while it is cached.
        if cached is not None and cached[0] is schema:
            return cached[1]
        text = json.dumps(example_of(schema), ensure_ascii=False)
        with self._lock:
            if len(self._examples) >= _EXAMPLES:
                self._examples.clear()
            self._examples[id(schema)] = (schema, text)
        return text
