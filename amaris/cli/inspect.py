"""``amaris rubrics show|history|diff`` and ``amaris memory inspect|search``.

Each command opens the store itself when it can. While a server holds the embedded
Qdrant folder (:class:`~amaris.memory.qdrant.StoreLockedError`) it asks that server's HTTP API
instead, with the bearer key from the configuration. The local path builds the very
models the API answers with, so the output (``--json`` or not) is the same either way.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
from qdrant_client import QdrantClient

from amaris.memory.embedder import build_embedder
from amaris.memory.inspection import inspect_memory, search_memory
from amaris.memory.qdrant import StoreLockedError, open_qdrant
from amaris.memory.store import MemoryStore
from amaris.redact import redact_url
from amaris.rubric.diff import diff_rubrics
from amaris.rubric.store import RubricStore
from amaris.settings import Settings, secret_value

WIDTH = 100
"""Widest line of the human-readable output."""


class CommandError(RuntimeError):
    """A command cannot answer; ``amaris`` prints the message and exits with ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# -- the store here, or the server's API -------------------------------------------------------


def server_url(settings: Settings, url: str | None = None) -> str:
    """``url``, else the configured server (a wildcard bind address is asked on loopback)."""
    return url.rstrip("/") if url else settings.server.local_url


def api_get(
    settings: Settings, url: str | None, path: str, params: Mapping[str, Any] | None = None
) -> Any:
    """The JSON answer of ``GET <server><path>``, with the configured bearer key.

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
            f"the store is locked by another process and its API is unreachable: {exc}", 1
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
    local: Callable[[QdrantClient], Any],
    path: str,
    params: Mapping[str, Any] | None = None,
) -> Any:
    """``local(client)`` on the store opened here, or ``GET path`` while a server holds it."""

    try:
        client = open_qdrant(settings.memory)
    except StoreLockedError:
        return api_get(settings, url, path, params)
    try:
        return local(client)
    finally:
        client.close()


def _rubric_store(client: QdrantClient, settings: Settings) -> RubricStore:

    return RubricStore(client, settings.memory.collection, settings.memory.rubrics_export_path)


def _memory_store(client: QdrantClient, settings: Settings) -> MemoryStore:

    embedder = build_embedder(settings.memory, settings.client)
    return MemoryStore(client, settings.memory.collection, embedder)


def _output(args: argparse.Namespace, data: Any, show: Callable[[Any], None]) -> int:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        show(data)
    return 0


# -- rubrics -----------------------------------------------------------------------------------


def rubrics_show(settings: Settings, args: argparse.Namespace) -> int:
    """The version in force (version 1 is created from the configuration if none)."""

    def local(client: QdrantClient) -> Any:
        version = _rubric_store(client, settings).ensure_initialized(settings)
        return version.public().model_dump(mode="json")

    return _output(args, read_store(settings, args.url, local, "/rubrics"), print_rubric)


def rubrics_history(settings: Settings, args: argparse.Namespace) -> int:
    """Every version, oldest first."""

    def local(client: QdrantClient) -> Any:
        versions = _rubric_store(client, settings).history()
        return [v.public().model_dump(mode="json") for v in versions]

    return _output(args, read_store(settings, args.url, local, "/rubrics/history"), print_history)


def rubrics_diff(settings: Settings, args: argparse.Namespace) -> int:
    """What changed from version ``a`` to ``b``."""

    def local(client: QdrantClient) -> Any:
        store = _rubric_store(client, settings)
        return diff_rubrics(store.get(args.a), store.get(args.b)).model_dump(mode="json")

    data = read_store(settings, args.url, local, "/rubrics/diff", {"a": args.a, "b": args.b})
    return _output(args, data, print_diff)


def print_rubric(rubric: dict[str, Any]) -> None:
    """One version with its criteria."""
    print(
        f"rubric version {rubric['version']} (origin {rubric['origin']}, parent "
        f"{rubric['parent']}, step {rubric['step']}, created {rubric['created_at']})"
    )
    for kind in ("anchors", "adaptive"):
        print(f"{kind}:")
        if not rubric[kind]:
            print("  (none)")
        for c in rubric[kind]:
            print(f"  {c['id']:>4}  weight {c['weight']:+.2f}  {c['text']}")


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def print_history(versions: list[dict[str, Any]]) -> None:
    """One line per version."""
    if not versions:
        print("no rubric version yet (a server creates version 1 at start)")
        return
    print(
        f"{'version':>7}  {'parent':>6}  {'origin':<8}  {'step':>5}  {'created_at':<32}  adaptive"
    )
    for v in versions:
        print(
            f"{v['version']:>7}  {_dash(v['parent']):>6}  {v['origin']:<8}  "
            f"{_dash(v['step']):>5}  {v['created_at']:<32}  {len(v['adaptive']):>8}"
        )


def _criterion(sign: str, c: dict[str, Any]) -> str:
    return f"{sign} {c['id']:>4}  weight {c['weight']:+.2f}  {c['text']}"


def print_diff(diff: dict[str, Any]) -> None:
    """``+`` added, ``-`` removed, ``~`` changed criteria."""
    counts = (
        f"{len(diff['added'])} added, {len(diff['removed'])} removed, "
        f"{len(diff['changed'])} changed"
    )
    if not (diff["added"] or diff["removed"] or diff["changed"]):
        counts = "no differences"
    print(f"rubric {diff['a']} -> {diff['b']}: {counts}")
    for c in diff["added"]:
        print(_criterion("+", c))
    for c in diff["removed"]:
        print(_criterion("-", c))
    for change in diff["changed"]:
        old, new = change["before"], change["after"]
        weight = (
            f"{old['weight']:+.2f}"
            if old["weight"] == new["weight"]
            else f"{old['weight']:+.2f} -> {new['weight']:+.2f}"
        )
        text = new["text"] if old["text"] == new["text"] else f"{old['text']} -> {new['text']}"
        print(f"~ {change['id']:>4}  weight {weight}  {text}")
    if diff["anchors_changed"]:
        print(
            "note: the anchors differ: the versions belong to different lineages "
            "(`amaris rubrics init`)"
        )


# -- memory ------------------------------------------------------------------------------------


def memory_inspect(settings: Settings, args: argparse.Namespace) -> int:
    """Documents per step, per type and step, and the latest documents."""

    def local(client: QdrantClient) -> Any:
        return inspect_memory(_memory_store(client, settings), args.recent).model_dump(mode="json")

    data = read_store(settings, args.url, local, "/memory/inspect", {"recent": args.recent})
    return _output(args, data, print_inspection)


def memory_search(settings: Settings, args: argparse.Namespace) -> int:
    """The documents most similar to the query, with their similarity."""

    def local(client: QdrantClient) -> Any:
        hits = search_memory(
            _memory_store(client, settings),
            args.query,
            limit=args.limit,
            doc_type=args.type,
            scope=args.scope,
        )
        return [hit.model_dump(mode="json") for hit in hits]

    params = {"q": args.query, "limit": args.limit, "type": args.type, "scope": args.scope}
    data = read_store(settings, args.url, local, "/memory/search", params)
    return _output(args, data, print_hits)


def _preview(text: str, room: int) -> str:
    flat = " ".join(text.split())  # stored policy and judge text: str methods, no regex
    return flat if len(flat) <= room else flat[: max(room - 3, 0)] + "..."


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


_CORNER = "type \\ step"


def _matrix(by_type: dict[str, dict[str, int]], steps: list[int]) -> list[str]:
    """Types as rows, steps as columns, in blocks that fit :data:`WIDTH`."""
    label = max([len(_CORNER), *map(len, by_type)])
    cells = [str(n) for counts in by_type.values() for n in counts.values()]
    column = max([len(str(s)) for s in steps] + [len(c) for c in cells]) + 2
    per_block = max((WIDTH - label) // column, 1)
    lines: list[str] = []
    for start in range(0, len(steps), per_block):
        block = steps[start : start + per_block]
        if start:
            lines.append("")
        lines.append(f"  {_CORNER:<{label}}" + "".join(f"{s:>{column}}" for s in block))
        for doc_type, counts in by_type.items():
            row = "".join(f"{counts.get(str(s), '.'):>{column}}" for s in block)
            lines.append(f"  {doc_type:<{label}}{row}")
    return lines


def print_inspection(data: dict[str, Any]) -> None:
    """Step histogram, type x step matrix, recent documents."""
    per_step = {int(step): count for step, count in data["per_step"].items()}
    total = sum(per_step.values())
    if not total:
        print("memory digest: empty")
        return
    print(f"memory digest: {total} documents over {len(per_step)} steps")
    print("\ndocuments per step")
    top = max(per_step.values())
    for step, count in sorted(per_step.items()):
        bar = "#" * max(1, round(40 * count / top))
        print(f"  step {step:>5}  {count:>6}  {bar}")
    print("\ndocuments by type and step")
    for line in _matrix(data["by_type_and_step"], sorted(per_step)):
        print(line)
    print(f"\nrecent documents (newest first, {len(data['recent'])})")
    where = _where(data["recent"])
    for doc, place in zip(data["recent"], where, strict=True):
        head = f"  {_when(doc['created_at'])}  step {doc['step']:>5}  {doc['type']:<13}  {place}  "
        print(head + _preview(doc["text"], WIDTH - len(head)))


def _where(docs: list[dict[str, Any]]) -> list[str]:
    """``scope/key`` of each document, padded to one width."""
    places = [f"{doc['scope']}/{doc['key']}" for doc in docs]
    width = max(map(len, places), default=0)
    return [place.ljust(width) for place in places]


def print_hits(hits: list[dict[str, Any]]) -> None:
    """One line per hit, best first."""
    if not hits:
        print("no matching documents")
        return
    where = _where(hits)
    print(f"  {'score':>6}  {'step':>5}  {'type':<13}  {'scope/key':<{len(where[0])}}  text")
    for hit, place in zip(hits, where, strict=True):
        head = f"  {hit['score']:>6.3f}  {hit['step']:>5}  {hit['type']:<13}  {place}  "
        print(head + _preview(hit["text"], WIDTH - len(head)))
