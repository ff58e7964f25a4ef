"""A strict JSON schema's bounds fitted to the completion cap (``max_tokens``).

A constrained decoder (vLLM, SGLang, llama.cpp, xgrammar, OpenAI's strict mode) writes
only what the schema allows, but knows nothing of ``max_tokens``: when the longest reply
the schema allows is longer than the cap, a model that fills its strings and lists (a
small one does) is cut mid-JSON by ``finish_reason: length``, and the reply is lost.
:func:`fit_schema` lowers the schema's ``maxLength`` (free-text strings) and ``maxItems``
(lists) until the longest reply it allows, estimated conservatively
(:func:`worst_case_tokens`), fits the cap: the grammar then closes the reply in time.

The estimate, per JSON value, in tokens:

- punctuation and the separators' spaces (``{`` ``}`` ``[`` ``]`` ``,`` ``:`` ``"``, the
  space xgrammar and vLLM put after ``,`` and ``:``): one token per character (tokenizers
  merge them; counting each is the conservative side);
- a string's characters and a key's name: ``ceil(characters / OUTPUT_CHARS_PER_TOKEN)``;
  an enumerated value: its longest option;
- a number: its longest bound's digits when both bounds are set, else
  :data:`NUMBER_TOKENS`; ``true`` / ``false`` / ``null``: one token per character;
- an object: every property (strict schemas require them all); a list: ``maxItems`` of
  its longest item; ``anyOf``: its longest branch.

The fit scales every bound by one factor (the largest that fits, found by bisection):
``maxLength`` to ``floor(bound * factor)`` but not under :data:`MIN_STRING_CHARS` (nor the
string's ``minLength``), ``maxItems`` to ``ceil(bound * factor)`` (so a list keeps at least
one item, and its ``minItems``). A string or list with no bound is first bounded by the
cap itself (it cannot be longer). Enumerations, numbers and the schema's shape are never
changed. When even the floors do not fit (a cap below the shortest useful reply), the
schema is returned unchanged (:attr:`Fit.fits` False): the caller says so.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass

from amaris.llm.schema import JsonScalar, SchemaNode

OUTPUT_CHARS_PER_TOKEN = 2.5
"""Characters per token of a reply's free text and key names. BPE tokenizers write English
prose at 4 to 6 characters per token and an agent's JSON reply, structure included, at
fewer; digits and hexadecimal ids go one character per token on tokenizers
that split digits (SmolLM2, Llama 3), so a string filled to its bound with digits can still
be cut. Below the prompt estimate's 3.5 (:data:`amaris.llm.budget.CHARS_PER_TOKEN`): a cut
reply costs a whole request, an over-estimate only some room."""
NUMBER_TOKENS = 12
"""Tokens of a number without both bounds (one per character of ``-0.1234567891``)."""
RESERVE_TOKENS = 8
"""Tokens of the cap kept out of the reply: the end-of-sequence and end-of-turn tokens
that servers count as completion tokens."""
MIN_STRING_CHARS = 16
"""A fitted free-text string keeps at least this many characters (or its own bound)."""

_PUNCTUATION = {"object": 2, "array": 2, "string": 2}
"""Tokens of the braces, brackets and quotes around a value."""
_PROPERTY = 4
"""Tokens around a property's name: its quotes, the colon and the space after it."""
_SEPARATOR = 2
"""Tokens between two values: the comma and the space after it."""
_BISECTIONS = 24
_FITTED_SCHEMAS = 256
"""Fitted schemas kept (:class:`FittedSchemas`): per schema object and cap."""

log = logging.getLogger("amaris.llm")


@dataclass(frozen=True)
class Fit:
    """What :func:`fit_schema` did: the factor the bounds were scaled by (1.0: unchanged),
    the worst-case reply in tokens before and after, and whether it fits the cap."""

    factor: float
    before: float
    after: float
    fits: bool


def _text_tokens(characters: int) -> int:
    return math.ceil(characters / OUTPUT_CHARS_PER_TOKEN)


def _literal_tokens(value: JsonScalar) -> int:
    if isinstance(value, str):
        return _PUNCTUATION["string"] + _text_tokens(len(value))
    # Numbers, booleans and null: one token per character.
    return len(str(value).lower() if isinstance(value, bool) else str(value))


def _number_tokens(node: SchemaNode) -> int:
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    if node.get("type") == "integer" and low is not None and high is not None:
        return max(len(str(int(low))), len(str(int(high))))
    return NUMBER_TOKENS


def _types(node: SchemaNode) -> list[str]:
    kind = node.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return [str(kind)] if kind is not None else []


def _fitted_length(node: SchemaNode, factor: float, cap_chars: int) -> int:
    bound = int(node.get("maxLength", cap_chars))
    floor = int(node.get("minLength", 0))
    if factor >= 1.0:
        return bound
    if factor <= 0.0:
        return floor
    return max(floor, min(bound, max(MIN_STRING_CHARS, math.floor(bound * factor))))


def _fitted_items(node: SchemaNode, factor: float, cap_items: int) -> int:
    bound = int(node.get("maxItems", cap_items))
    floor = int(node.get("minItems", 0))
    if factor >= 1.0:
        return bound
    if factor <= 0.0:
        return floor
    return max(floor, min(bound, math.ceil(bound * factor)))


def _free_text(node: SchemaNode) -> bool:
    return "string" in _types(node) and "enum" not in node and "const" not in node


def _cost(node: SchemaNode, factor: float, cap: int) -> float:
    """Worst-case tokens of a value of ``node`` with its bounds scaled by ``factor``
    (unbounded strings and lists bounded by ``cap`` tokens first)."""
    if "enum" in node:
        return max((_literal_tokens(v) for v in node["enum"]), default=0)
    if "const" in node:
        return _literal_tokens(node["const"])
    if "anyOf" in node:
        return max((_cost(branch, factor, cap) for branch in node["anyOf"]), default=0)
    costs = [_cost_of_type(node, kind, factor, cap) for kind in _types(node)]
    return max(costs) if costs else math.inf


def _cost_of_type(node: SchemaNode, kind: str, factor: float, cap: int) -> float:
    if kind == "object":
        properties = node.get("properties", {})
        total: float = _PUNCTUATION["object"] + _SEPARATOR * max(0, len(properties) - 1)
        for name, sub in properties.items():
            total += _PROPERTY + _text_tokens(len(name)) + _cost(sub, factor, cap)
        return total
    if kind == "array":
        items = _fitted_items(node, factor, cap)
        if items == 0:
            return _PUNCTUATION["array"]
        item = _cost(node.get("items", {}), factor, cap)
        return _PUNCTUATION["array"] + items * item + _SEPARATOR * (items - 1)
    if kind == "string":
        length = _fitted_length(node, factor, math.ceil(cap * OUTPUT_CHARS_PER_TOKEN))
        return _PUNCTUATION["string"] + _text_tokens(length)
    if kind in ("integer", "number"):
        return _number_tokens(node)
    if kind == "boolean":
        return len("false")
    if kind == "null":
        return len("null")
    return math.inf


def worst_case_tokens(schema: SchemaNode) -> float:
    """Estimated tokens of the longest reply ``schema`` allows, compact JSON (``inf`` when
    a string or list has no bound, or a value is of no known type)."""
    return _cost(schema, 1.0, 0) if _bounded(schema) else math.inf


def _bounded(node: SchemaNode) -> bool:
    if _free_text(node) and "maxLength" not in node:
        return False
    if "array" in _types(node) and "maxItems" not in node:
        return False
    children = [*node.get("properties", {}).values(), *node.get("anyOf", [])]
    if "items" in node:
        children.append(node["items"])
    return all(_bounded(c) for c in children)


def _apply(node: SchemaNode, factor: float, cap: int) -> SchemaNode:
    """A copy of ``node`` with its string and list bounds scaled by ``factor``."""
    # A shallow copy keeps the keywords' order; the values that are lists are copied
    # (their items are names or JSON scalars), the child schemas rebuilt.
    out = node.copy()
    if "properties" in node:
        out["properties"] = {
            name: _apply(sub, factor, cap) for name, sub in node["properties"].items()
        }
    if "items" in node:
        out["items"] = _apply(node["items"], factor, cap)
    if "anyOf" in node:
        out["anyOf"] = [_apply(branch, factor, cap) for branch in node["anyOf"]]
    if "enum" in node:
        out["enum"] = list(node["enum"])
    if "required" in node:
        out["required"] = list(node["required"])
    kind = node.get("type")
    if isinstance(kind, list):
        out["type"] = list(kind)
    if _free_text(node):
        out["maxLength"] = _fitted_length(node, factor, math.ceil(cap * OUTPUT_CHARS_PER_TOKEN))
    if "array" in _types(node):
        out["maxItems"] = _fitted_items(node, factor, cap)
    return out


def reply_budget(max_tokens: int) -> int:
    """Tokens of ``max_tokens`` a reply may take (:data:`RESERVE_TOKENS` kept out)."""
    return max(0, max_tokens - RESERVE_TOKENS)


def fit_schema(schema: SchemaNode, max_tokens: int) -> tuple[SchemaNode, Fit]:
    """``schema`` with its bounds lowered so that its longest reply fits ``max_tokens``
    (:func:`reply_budget`), and what was done. ``schema`` itself is not changed; it is
    returned as is when its longest reply already fits, or when no factor makes it fit."""
    budget = reply_budget(max_tokens)
    before = worst_case_tokens(schema)
    if before <= budget:
        return schema, Fit(1.0, before, before, True)
    if _cost(schema, 1.0, budget) <= budget:
        # Only the unbounded strings and lists needed a bound: the cap's own.
        return _apply(schema, 1.0, budget), Fit(1.0, before, _cost(schema, 1.0, budget), True)
    low, high = math.ulp(0.0), 1.0
    floors = _cost(schema, low, budget)
    if floors > budget:
        # ``after``: the shortest reply the bounds allow at their floors (what the warning
        # of :class:`FittedSchemas` quotes), not ``before`` (``inf`` for an unbounded one).
        return schema, Fit(1.0, before, floors, False)
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if _cost(schema, middle, budget) <= budget:
            low = middle
        else:
            high = middle
    return _apply(schema, low, budget), Fit(low, before, _cost(schema, low, budget), True)


class FittedSchemas:
    """:func:`fit_schema` once per schema object and cap (the scorer's per-rubric schemas
    and the agents' cached ones are the same object call after call); shared by threads.
    The first fit of each agent, schema and cap is logged, and a cap too small to fit is
    warned about."""

    def __init__(self) -> None:
        self._fits: dict[tuple[int, int], tuple[SchemaNode, SchemaNode]] = {}
        self._logged: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()

    def fitted(self, agent: str, name: str, schema: SchemaNode, max_tokens: int) -> SchemaNode:
        """``schema`` with its bounds fitted to ``max_tokens``."""
        key = (id(schema), max_tokens)
        with self._lock:
            cached = self._fits.get(key)
        # The entry holds the schema itself: its id cannot be reused while it is cached.
        if cached is not None and cached[0] is schema:
            return cached[1]
        fitted, fit = fit_schema(schema, max_tokens)
        with self._lock:
            if len(self._fits) >= _FITTED_SCHEMAS:
                self._fits.clear()
            self._fits[key] = (schema, fitted)
            first = (agent, name, max_tokens) not in self._logged
            self._logged.add((agent, name, max_tokens))
        if first and not fit.fits:
            log.warning(
                "%s: max_tokens %d is below the shortest reply schema %s allows with its "
                "bounds at their floors (~%.0f tokens): replies may be cut (judge_truncated)",
                agent,
                max_tokens,
                name,
                fit.after,
            )
        elif first and fitted is not schema:
            log.info(
                "%s: schema %s bounds fitted to max_tokens %d (factor %.3f; longest reply "
                "~%.0f -> ~%.0f tokens)",
                agent,
                name,
                max_tokens,
                fit.factor,
                fit.before,
                fit.after,
            )
        return fitted
