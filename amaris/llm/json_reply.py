"""Reading a model's answer: one JSON object, parsed strictly, repaired when short enough,
its strings made storable, then validated by the agent's schema.

A reply is untrusted text: its JSON is parsed on the event loop only when it is short
(:data:`INLINE_PARSE_CHARS`), repaired only up to :data:`REPAIR_MAX_CHARS` and always off
the loop, and any failure to read it (nesting too deep, a number too long) is an invalid
output (``ValueError``), never another error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

import json_repair
from pydantic import BaseModel

from amaris.jsonfile import JSONDict
from amaris.models import storable

T = TypeVar("T", bound=BaseModel)

JsonObject: TypeAlias = JSONDict
"""A JSON object as a model or an endpoint wrote it: JSON of unknown shape is the point
(it is read by a schema, or by code that checks every field it uses)."""

INLINE_PARSE_CHARS = 16_384
"""Longest answer parsed and validated on the event loop; a longer one is read in a
worker thread (``json.loads`` and validation of 256 KB take milliseconds)."""
REPAIR_MAX_CHARS = 65_536
"""Longest answer ``json_repair`` is run on (in a worker thread; ~5 us a character): a
longer answer that is not JSON is an invalid output."""


def strict_json_object(text: str) -> JsonObject | None:
    """``text`` as a JSON object, if it is exactly one, its strings made storable; None
    when it is not JSON or not an object.

    Raises:
        ValueError: it nests too deep, or holds an integer too long, to be read.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    except RecursionError:
        raise ValueError("output nests too deep to parse") from None
    if not isinstance(value, dict):
        return None
    # A lone surrogate can only come from a \\u escape: text without one is storable.
    return _storable(value) if "\\u" in text else value


def parse_json_object(text: str) -> tuple[JsonObject, bool]:
    """Parse a JSON object from model output; returns (object, repaired).

    Strings in it are made storable (:func:`~amaris.models.storable`: a ``"\\ud800"``
    escape decodes to a lone surrogate). ``json_repair`` is tried on an answer that is not
    a JSON object when it is at most :data:`REPAIR_MAX_CHARS` long: call this off the event
    loop unless the answer is short.

    Raises:
        ValueError: no JSON object can be recovered.
    """
    stripped = text.strip()
    value = strict_json_object(stripped)
    if value is not None:
        return value, False
    if len(stripped) > REPAIR_MAX_CHARS:
        raise ValueError(
            f"output is not a JSON object, and too long to repair ({len(stripped)} "
            f"characters; the limit is {REPAIR_MAX_CHARS})"
        )
    try:
        repaired = json_repair.loads(stripped)
    except RecursionError:
        raise ValueError("output is not a JSON object, and nests too deep to repair") from None
    except Exception as exc:
        # A heuristic parser of text the model wrote: its failure is one more answer that
        # does not parse (an invalid output), never an error of the request.
        raise ValueError(f"output is not a JSON object ({type(exc).__name__} in repair)") from exc
    if isinstance(repaired, dict) and repaired:
        return _storable(repaired), True
    raise ValueError("output is not a JSON object")


def inline_object(answer: str) -> JsonObject | None:
    """``answer``'s JSON object when it is short enough to read on the event loop and is
    exactly one; else None (read it with :func:`read_reply` in a worker thread)."""
    if len(answer) > INLINE_PARSE_CHARS:
        return None
    try:
        return strict_json_object(answer.strip())
    except ValueError:
        return None


def read_reply(
    answer: str,
    schema: type[T],
    check: Callable[[T], None] | None,
    parsed: JsonObject | None = None,
) -> tuple[T, bool]:
    """``answer`` (or ``parsed``, its JSON object when already read) validated by
    ``schema`` and ``check``; returns (result, repaired).

    Raises:
        ValueError: not a JSON object, or refused by ``check``.
        ValidationError: refused by ``schema``.
    """
    data, repaired = (parsed, False) if parsed is not None else parse_json_object(answer)
    result = schema.model_validate(data)
    if check is not None:
        check(result)
    return result, repaired


def _storable(value: JsonObject) -> JsonObject:
    """``value`` with every string in it (keys too) storable; iterative (no recursion)."""
    root: JsonObject = {}
    stack: list[tuple[Any, JsonObject | list[Any]]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else ((None, v) for v in source)
        for key, child in items:
            if isinstance(child, dict | list):
                copy: JsonObject | list[Any] = {} if isinstance(child, dict) else []
                stack.append((child, copy))
                child = copy
            elif isinstance(child, str):
                child = storable(child)
            if isinstance(target, dict):
                target[storable(str(key))] = child
            else:
                target.append(child)
    return root
