"""Reading a model's answer: one JSON object, parsed strictly, repaired when short enough,
its strings made storable, then validated by the agent's schema.

Its strings (keys too) are made storable (:func:`~amaris.models.storable`) in one pass
over its JSON written out again (a lone surrogate as itself): strings never touch in that
text (quotes part them), so only a surrogate pair within one string is joined, as
:func:`~amaris.models.storable` of each string would.

A reply is untrusted text: its JSON is parsed on the event loop only when it is short
(:data:`INLINE_PARSE_CHARS`), repaired only up to :data:`REPAIR_MAX_CHARS` and always off
the loop, and any failure to read it (nesting too deep, a number too long) is an invalid
output (``ValueError``), never another error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

import json_repair
from pydantic import BaseModel

from amaris.jsonfile import JSONDict
from amaris.text_fields import storable

T = TypeVar("T", bound=BaseModel)

INLINE_PARSE_CHARS = 16_384
"""Longest answer parsed and validated on the event loop; a longer one is read in a
worker thread (``json.loads`` and validation of a long one would stall the loop)."""
REPAIR_MAX_CHARS = 65_536
"""Longest answer ``json_repair`` is run on (in a worker thread; slow per character): a
longer answer that is not JSON is an invalid output."""


# A JSON object as a model or an endpoint wrote it: JSON of unknown shape is the point (it
# is read by a schema, or by code that checks every field it uses).
def strict_json_object(text: str) -> JSONDict | None:
    """``text`` as a JSON object, if it is exactly one, its strings made storable; None
    when it is not JSON or not an object.

    Raises:
        ValueError: it nests too deep, or holds an integer too long, to be read.
    """
    try:
        value = json.loads(text)
        # A lone surrogate can only come from a \\u escape: text without one is storable.
        if isinstance(value, dict) and "\\u" in text:
            value = json.loads(storable(json.dumps(value, ensure_ascii=False)))
    except json.JSONDecodeError:
        return None
    except RecursionError:
        raise ValueError("output nests too deep to parse") from None
    if not isinstance(value, dict):
        return None
    return value


# A JSON object as a model wrote it (or as repaired): read by a schema after.
def parse_json_object(text: str) -> tuple[JSONDict, bool]:
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
        try:
            return json.loads(storable(json.dumps(repaired, ensure_ascii=False))), True
        except RecursionError:
            raise ValueError("output is not a JSON object, and nests too deep to read") from None
    raise ValueError("output is not a JSON object")


def read_inline(
    answer: str, schema: type[T], check: Callable[[T], None] | None
) -> tuple[T, bool] | None:
    """:func:`read_reply` of ``answer`` when it is short enough to read on the event loop
    and is exactly one JSON object (never repaired: ``repaired`` is False); else None
    (read it with :func:`read_reply` in a worker thread).

    Raises:
        ValueError: refused by ``check``.
        ValidationError: refused by ``schema``.
    """
    if len(answer) > INLINE_PARSE_CHARS:
        return None
    try:
        data = strict_json_object(answer.strip())
    except ValueError:
        return None
    if data is None:
        return None
    return _checked(schema.model_validate(data), check), False


def read_reply(answer: str, schema: type[T], check: Callable[[T], None] | None) -> tuple[T, bool]:
    """``answer`` validated by ``schema`` and ``check``; returns (result, repaired).

    Raises:
        ValueError: not a JSON object, or refused by ``check``.
        ValidationError: refused by ``schema``.
    """
    data, repaired = parse_json_object(answer)
    return _checked(schema.model_validate(data), check), repaired


def _checked(result: T, check: Callable[[T], None] | None) -> T:
    if check is not None:
        check(result)
    return result
