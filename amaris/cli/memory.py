"""``amaris memory inspect|search``: the pipeline's searchable memory (:mod:`amaris.cli.store`
says how a command reads it while a server holds it)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import TypeAdapter
from qdrant_client import QdrantClient

from amaris.cli.config import load
from amaris.cli.store import output, read_store
from amaris.memory.embedder import build_embedder
from amaris.memory.inspection import (
    MemoryInspection,
    MemorySearchHit,
    RecentDocument,
    inspect_memory,
    search_memory,
)
from amaris.memory.store import MemoryStore
from amaris.settings import Settings

WIDTH = 100
"""Widest line of the human-readable output."""

INSPECTION = TypeAdapter(MemoryInspection)
HITS = TypeAdapter(list[MemorySearchHit])


def _memory_store(client: QdrantClient, settings: Settings) -> MemoryStore:
    embedder = build_embedder(settings.memory, settings.client)
    return MemoryStore(client, settings.memory.collection, embedder)


def inspect(args: argparse.Namespace) -> int:
    """Documents per step, per type and step, and the latest documents."""
    settings = load(args)

    def local(client: QdrantClient) -> MemoryInspection:
        return inspect_memory(_memory_store(client, settings), args.recent)

    params = {"recent": args.recent}
    found = read_store(settings, args.url, INSPECTION, local, "/memory/inspect", params)
    return output(args.json, INSPECTION, found, print_inspection)


def search(args: argparse.Namespace) -> int:
    """The documents most similar to the query, with their similarity."""
    settings = load(args)

    def local(client: QdrantClient) -> list[MemorySearchHit]:
        return search_memory(
            _memory_store(client, settings),
            args.query,
            limit=args.limit,
            doc_type=args.type,
            scope=args.scope,
        )

    params = {"q": args.query, "limit": args.limit, "type": args.type, "scope": args.scope}
    hits = read_store(settings, args.url, HITS, local, "/memory/search", params)
    return output(args.json, HITS, hits, print_hits)


def _preview(text: str, room: int) -> str:
    flat = " ".join(text.split())  # stored policy and judge text: str methods, no regex
    return flat if len(flat) <= room else flat[: max(room - 3, 0)] + "..."


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


_CORNER = "type \\ step"


def _matrix(by_type: dict[str, dict[int, int]], steps: list[int]) -> list[str]:
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
            row = "".join(f"{counts.get(s, '.'):>{column}}" for s in block)
            lines.append(f"  {doc_type:<{label}}{row}")
    return lines


def print_inspection(data: MemoryInspection) -> None:
    """Step histogram, type x step matrix, recent documents."""
    per_step = data.per_step
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
    for line in _matrix(data.by_type_and_step, sorted(per_step)):
        print(line)
    print(f"\nrecent documents (newest first, {len(data.recent)})")
    where = _where(data.recent)
    for doc, place in zip(data.recent, where, strict=True):
        head = f"  {_when(doc.created_at)}  step {doc.step:>5}  {doc.type:<13}  {place}  "
        print(head + _preview(doc.text, WIDTH - len(head)))


def _where(docs: Sequence[RecentDocument | MemorySearchHit]) -> list[str]:
    """``scope/key`` of each document, padded to one width."""
    places = [f"{doc.scope}/{doc.key}" for doc in docs]
    width = max(map(len, places), default=0)
    return [place.ljust(width) for place in places]


def print_hits(hits: list[MemorySearchHit]) -> None:
    """One line per hit, best first."""
    if not hits:
        print("no matching documents")
        return
    where = _where(hits)
    print(f"  {'score':>6}  {'step':>5}  {'type':<13}  {'scope/key':<{len(where[0])}}  text")
    for hit, place in zip(hits, where, strict=True):
        head = f"  {hit.score:>6.3f}  {hit.step:>5}  {hit.type:<13}  {place}  "
        print(head + _preview(hit.text, WIDTH - len(head)))
