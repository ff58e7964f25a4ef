"""Text and JSON a request may carry: valid Unicode, finite numbers, bounded nesting:
what can be stored and sent back."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import AfterValidator, Strict
from pydantic_core import PydanticCustomError

from amaris.jsonfile import JSONDict

MAX_JSON_DEPTH = 32
"""Deepest nesting of a free-form JSON value (``rollout.metadata``, the training metadata's
extra fields, ``/get_reward`` labels): ``{}`` and ``[]`` are one level."""


def valid_text(value: str) -> str:
    """``value``, if it is Unicode text that can be stored and sent back (UTF-8).

    Raises:
        PydanticCustomError: it holds a lone surrogate (``"\\ud800"`` in JSON), which no
            UTF-8 encoder accepts: stored, it would fail every later read of its step.
    """
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PydanticCustomError(
                "invalid_text",
                "has a lone surrogate (U+{code}) at character {at}: not valid Unicode text",
                {"code": f"{ord(value[exc.start]):04X}", "at": exc.start},
            ) from None
    return value


def storable(value: str) -> str:
    """``value`` with every lone surrogate replaced by U+FFFD: text amaris did not write
    (a judge's reply, an error quoting it) made safe to store, log and send back."""
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Through UTF-16, surrogate pairs are joined again and lone ones replaced.
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def valid_json(value: Any) -> Any:
    """``value``, if it is a JSON value amaris can store: strings (keys too) valid text,
    numbers finite, nesting at most :data:`MAX_JSON_DEPTH` levels.

    Iterative, so a deep value cannot exhaust the stack here.

    Raises:
        PydanticCustomError: the first problem found, with where it is (``$.key[0]``).
    """
    stack: list[tuple[Any, int, str]] = [(value, 0, "$")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise PydanticCustomError(
                    "json_too_deep",
                    "is nested deeper than {limit} levels (at {where})",
                    {"limit": MAX_JSON_DEPTH, "where": _short(where)},
                )
            if isinstance(item, dict):
                for key, child in item.items():
                    _text_at(str(key), f"a key of {where}")
                    stack.append((child, depth + 1, f"{where}.{key}"))
            else:
                stack.extend((child, depth + 1, f"{where}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, str):
            _text_at(item, where)
        elif isinstance(item, float) and not math.isfinite(item):
            raise PydanticCustomError(
                "json_number",
                "has {value} at {where}: NaN and Infinity are not JSON numbers",
                {"value": str(item), "where": _short(where)},
            )
    return value


def _text_at(text: str, where: str) -> None:
    try:
        valid_text(text)
    except PydanticCustomError as exc:
        raise PydanticCustomError(
            "invalid_text",
            "{problem} (in {where})",
            {"where": _short(where), "problem": exc.message()},
        ) from None


def _short(where: str) -> str:
    return where if len(where) <= 120 else where[:117] + "..."


def json_chars(value: Any) -> int:
    """Size of a JSON value as amaris counts it against ``scoring.max_field_chars``: the
    characters of its compact JSON encoding."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


JSONValue = Annotated[Any, AfterValidator(valid_json)]
"""A free-form JSON value of a request (see :func:`valid_json`)."""
JSONObject = Annotated[JSONDict, AfterValidator(valid_json)]
"""A free-form JSON object of a request (see :func:`valid_json`)."""


Text = Annotated[str, AfterValidator(valid_text)]
"""A string field of a request: valid Unicode text (see :func:`valid_text`)."""
StrictText = Annotated[str, Strict(), AfterValidator(valid_text)]
"""Text that must arrive as a JSON string, never coerced from another type."""
