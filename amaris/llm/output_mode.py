"""Which structured-output mode each endpoint gets, and the fallback when one is refused.

With ``structured_output: auto`` (the default) a request asks for the agent's strict JSON
schema. An endpoint that answers ``400`` naming ``response_format`` or ``json_schema``
does not support it: amaris falls back to ``json_object``, then to the prompt alone,
remembers the mode for that endpoint and model (for every agent and both gateways that
share this registry), logs it once and reports it in ``/healthz``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Literal

import openai
from openai.types.shared_params import ResponseFormatJSONObject, ResponseFormatJSONSchema

from amaris.llm.schema import SchemaNode

OutputMode = Literal["json_schema", "json_object", "none"]

RequestFormat = (
    ResponseFormatJSONSchema
    | ResponseFormatJSONObject
    | dict[str, Any]  # an agent's configured one: the provider's JSON, sent as written
)
"""The ``response_format`` of a chat request: the one a mode asks for
(:func:`response_format`), or the agent's configured one."""

_NEXT: dict[str, OutputMode] = {"json_schema": "json_object", "json_object": "none"}
_RANK = {"json_schema": 0, "json_object": 1, "none": 2}
_REFUSAL = ("response_format", "json_schema")
"""What a refusal of the output format names (any case)."""

log = logging.getLogger("amaris.llm")


@dataclass(frozen=True)
class ModeState:
    """The mode requests are sent in, and why."""

    mode: OutputMode | Literal["configured"]
    """``configured``: the agent's ``response_format`` is sent as written."""
    reason: str


DEFAULT = ModeState("json_schema", "default (structured_output: auto)")


def refuses_format(exc: BaseException) -> bool:
    """A ``400`` whose message names ``response_format`` or ``json_schema``."""
    if not (isinstance(exc, openai.APIStatusError) and exc.status_code == 400):
        return False
    text = str(exc).casefold()
    return any(word in text for word in _REFUSAL)


def response_format(
    mode: OutputMode, name: str, schema: SchemaNode
) -> ResponseFormatJSONSchema | ResponseFormatJSONObject | None:
    """The ``response_format`` field of a request in ``mode`` (None: not sent), the schema
    inside it."""
    if mode == "json_schema":
        return {
            "type": "json_schema",
            # The SDK types a schema as a dict of JSON values: a shallow copy, same keys.
            "json_schema": {"name": name, "strict": True, "schema": dict(schema)},
        }
    if mode == "json_object":
        return {"type": "json_object"}
    return None


class OutputModes:
    """The mode in use per (endpoint, model) under ``auto``; shared across threads."""

    def __init__(self) -> None:
        self._fallen: dict[tuple[str, str], ModeState] = {}
        self._lock = threading.Lock()

    def auto(self, endpoint: str, model: str) -> ModeState:
        """The mode ``auto`` uses for ``model`` at ``endpoint`` now."""
        return self._fallen.get((endpoint, model), DEFAULT)

    def fall_back(self, endpoint: str, model: str, refused: OutputMode, error: str) -> bool:
        """Record that ``endpoint`` refused ``refused``; False when no mode is left.

        Concurrent requests may all see the refusal: the mode only ever moves down, and
        the change is logged once.
        """
        following = _NEXT.get(refused)
        if following is None:
            return False
        key = (endpoint, model)
        with self._lock:
            current = self._fallen.get(key, DEFAULT)
            if _RANK[following] <= _RANK[str(current.mode)]:
                return True
            reason = f"fallback: {refused} refused with 400: {error}"
            self._fallen[key] = ModeState(following, reason)
        log.warning(
            "%s (%s) refused response_format %s; using %s from now on: %s",
            endpoint,
            model,
            refused,
            following,
            error,
        )
        return True
