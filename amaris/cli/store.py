"""The store opened here, or the server's API while a server holds it.

A command reading the store (``rubrics``, ``memory``, ``export``) opens it itself when it
can. While a server holds the embedded Qdrant folder
(:class:`~amaris.memory.qdrant.StoreLockedError`) it asks that server's HTTP API instead,
with the bearer key from the configuration. The local path builds the very models the
API answers with, so the output (``--json`` or not) is the same either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import httpx
from pydantic import TypeAdapter
from qdrant_client import QdrantClient

from amaris.cli.common import CommandError
from amaris.cli.config import server_url
from amaris.memory.qdrant import StoreLockedError, open_qdrant
from amaris.memory.records import RolloutRecord
from amaris.redact import redact_url
from amaris.settings import Settings, secret_value

T = TypeVar("T")

Query = Mapping[str, str | int | None]
"""Query parameters of a ``GET``; a None value is left out."""


def api_get(settings: Settings, url: str | None, path: str, params: Query | None = None) -> Any:
    """The JSON answer of ``GET <server><path>`` (any JSON: the caller validates it), with
    the configured bearer key.

    Raises:
        CommandError: code 1 if the server is unreachable, 2 if it answers an error.
    """
    key = secret_value(settings.server.api_key)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    query = {name: value for name, value in (params or {}).items() if value is not None}
    base = server_url(settings, url)
    try:
        response = httpx.get(f"{base}{path}", params=query, headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        raise CommandError(
            f"the store is locked by another process and its API at {redact_url(base)} is "
            f"unreachable ({exc}): start the server, or give its address with --url",
            1,
        ) from exc
    if response.is_success:
        return response.json()
    try:
        problems = [d["message"] for d in response.json()["detail"]]
    except (ValueError, KeyError, TypeError):
        problems = [response.text or response.reason_phrase]
    raise CommandError(
        f"{'; '.join(problems)} (HTTP {response.status_code} from {redact_url(base)})"
    )


def read_store(
    settings: Settings,
    url: str | None,
    answer: TypeAdapter[T],
    local: Callable[[QdrantClient], T],
    path: str,
    params: Query | None = None,
) -> T:
    """``local(client)`` on the store opened here, or the answer of ``GET path`` (validated
    as ``answer``) while a server holds it."""
    try:
        client = open_qdrant(settings.memory)
    except StoreLockedError:
        return answer.validate_python(api_get(settings, url, path, params))
    try:
        return local(client)
    finally:
        client.close()


def output(as_json: bool, answer: TypeAdapter[T], value: T, show: Callable[[T], None]) -> int:
    """Print ``value``: as JSON (``--json``), else with ``show``."""
    if as_json:
        print(json.dumps(answer.dump_python(value, mode="json"), indent=2, ensure_ascii=False))
    else:
        show(value)
    return 0


def api_records(settings: Settings, url: str | None) -> list[RolloutRecord]:
    """Every rollout-log record, step by step, through a running server's API; its
    :meth:`~RolloutRecord.to_json` is the JSON the API sent (``amaris export``, a
    simulation's ``rollouts.jsonl``, read by ``amaris replay``)."""
    return [
        RolloutRecord.model_validate(record)
        for entry in api_get(settings, url, "/steps")
        for record in api_get(settings, url, f"/steps/{entry['step']}/rollouts")["records"]
    ]
