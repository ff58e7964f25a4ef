"""The pipeline's memory in Qdrant: a searchable digest and the full per-rollout analyses.

``<prefix>_memory`` holds few documents per step (summaries, rubric updates, notable
findings) with their embedding; ``<prefix>_analyses`` (payload only) holds every
analysis of a step, read back by id. Every read is a search of the digest or a
``retrieve`` of deterministic ids: nothing on the request or step path scans a
collection, and no Qdrant filter is used (embedded Qdrant evaluates filters in Python,
slow on a large collection). Methods block; async callers run them in a thread.
"""

from __future__ import annotations

import heapq
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from qdrant_client import QdrantClient, models

from amaris.memory.coalesce import Coalescing, Remembered
from amaris.memory.embedder import Embedder
from amaris.memory.models import SUMMARY_IDENTITIES, HackProbe, MemoryDocument, MemoryHit
from amaris.memory.qdrant import delete_points, ensure_collection
from amaris.models import JSONObject

_NAMESPACE = uuid.UUID("0b6f3d52-8f0e-4c55-9d6e-3a7c2e91d4f0")
_MARKER_TYPE = "_embedder"
_LIGHT_FIELDS = ["type", "step", "scope", "created_at"]


class MemoryStoreError(RuntimeError):
    """The memory cannot serve this configuration (e.g. another embedder wrote it)."""


def document_id(doc_type: str, scope: str, step: int, key: str) -> str:
    """The point id of a digest document: one per ``(type, scope, step, key)``."""
    return str(uuid.uuid5(_NAMESPACE, f"doc/{doc_type}/{scope}/{step}/{key}"))


def _analysis_id(scope: str, step: int, rollout_id: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"analysis/{scope}/{step}/{rollout_id}"))


def _hacks_id(scope: str, step: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"hacks/{scope}/{step}"))


_MARKER_ID = str(uuid.uuid5(_NAMESPACE, "embedder"))

HACK_LOOKBACK_STEPS = 64
"""How many steps back :meth:`MemoryStore.recent_hacks` looks for remembered hacks."""
_HACK_WINDOW = 16


class MemoryStore:
    """Digest documents with semantic search, and per-rollout analyses by id."""

    def __init__(
        self, client: QdrantClient, prefix: str, embedder: Embedder, *, max_fetch: int = 512
    ) -> None:
        """Open (creating if needed) ``<prefix>_memory`` and ``<prefix>_analyses``.

        Args:
            client: Qdrant client.
            prefix: ``memory.collection``.
            embedder: Must be the embedder the memory was written with.
            max_fetch: Most candidates one search reads before its Python filters.

        Raises:
            MemoryStoreError: the memory was written by an embedder of another name.
            amaris.memory.qdrant.CollectionMismatchError: ... or of another dimension.
        """
        self._qdrant = client
        self._embedder = embedder
        self._embed = Coalescing(embedder.embed)
        self._criteria = Remembered(self._embed)
        self._memory = f"{prefix}_memory"
        self._analyses = f"{prefix}_analyses"
        self._max_fetch = max_fetch
        self._lock = threading.Lock()
        ensure_collection(client, self._memory, embedder.dim)
        ensure_collection(client, self._analyses, None)
        self._check_embedder()

    def _check_embedder(self) -> None:
        # Two embedders of equal dimension (hashing and MiniLM) would mix vector spaces
        # silently, so the memory records which one wrote it.
        points = self._qdrant.retrieve(self._memory, ids=[_MARKER_ID], with_payload=True)
        if points:
            written_by = (points[0].payload or {}).get("embedder")
            if written_by != self._embedder.name:
                raise MemoryStoreError(
                    f"{self._memory} was written with embedder {written_by!r}, not "
                    f"{self._embedder.name!r}; set memory.embedding_model back or use another "
                    "memory.collection"
                )
            return
        basis = [1.0] + [0.0] * (self._embedder.dim - 1)
        payload = {"type": _MARKER_TYPE, "embedder": self._embedder.name}
        self._qdrant.upsert(
            self._memory, points=[models.PointStruct(id=_MARKER_ID, vector=basis, payload=payload)]
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors of ``texts`` in the memory's space (its embedder; blocking): the
        rubric guardrails' similarity of criteria."""
        return self._criteria(texts)

    # -- digest ----------------------------------------------------------------
    def add_documents(
        self, docs: Sequence[MemoryDocument], *, searchable: bool = True
    ) -> list[str]:
        """Embed and store documents; a document of the same identity is replaced.

        ``searchable=False``: stored without a vector, read by id only (static memory,
        inspection), never embedded: a per_instance step's summaries, one per prompt.

        Returns:
            Their point ids, in order.
        """
        if not docs:
            return []
        if not searchable:
            points = [
                models.PointStruct(
                    id=document_id(doc.type, doc.scope, doc.step, doc.key),
                    vector={},
                    payload=doc.model_dump(mode="json"),
                )
                for doc in docs
            ]
            with self._lock:
                self._qdrant.upsert(self._analyses, points=points)
            return [str(p.id) for p in points]
        vectors = self._embed([doc.text for doc in docs])  # slow: outside the lock
        points = []
        for doc, vector in zip(docs, vectors, strict=True):
            payload = doc.model_dump(mode="json")
            point_id = document_id(doc.type, doc.scope, doc.step, doc.key)
            points.append(models.PointStruct(id=point_id, vector=vector, payload=payload))
        with self._lock:
            self._qdrant.upsert(self._memory, points=points)
        return [str(p.id) for p in points]

    def search(
        self,
        query: str,
        *,
        limit: int,
        exclude_step: int | None = None,
        scope: str | None = None,
        types: set[str] | None = None,
    ) -> list[MemoryHit]:
        """The documents most similar to ``query``, best first.

        Reads ``4 * limit`` nearest candidates (light payload), filters them in Python,
        and reads more (x4 each time, up to ``max_fetch``) until ``limit`` pass; a very
        selective filter may therefore return fewer than ``limit``.

        Args:
            query: Free text.
            limit: Most hits.
            exclude_step: Leave out this step's documents (the step being evolved).
            scope: Only this scope; None = all.
            types: Only these document types; None = all.
        """
        return self.search_many(
            [query], limit=limit, exclude_step=exclude_step, scope=scope, types=types
        )[0]

    def search_many(
        self,
        queries: Sequence[str],
        *,
        limit: int,
        exclude_step: int | None = None,
        scope: str | None = None,
        types: set[str] | None = None,
    ) -> list[list[MemoryHit]]:
        """:meth:`search` of each of ``queries``, in order, their distinct texts embedded
        together (one embedder call, not one per query)."""
        asked = list(dict.fromkeys(q for q in queries if limit > 0 and q.strip()))
        vectors = dict(zip(asked, self._embed(asked), strict=True)) if asked else {}
        return [
            self._nearest(vectors[q], limit, exclude_step, scope, types) if q in vectors else []
            for q in queries
        ]

    def _nearest(
        self,
        vector: list[float],
        limit: int,
        exclude_step: int | None,
        scope: str | None,
        types: set[str] | None,
    ) -> list[MemoryHit]:
        fetch = min(limit * 4, self._max_fetch)
        scores: dict[str, float] = {}
        while True:
            with self._lock:
                points = self._qdrant.query_points(
                    self._memory, query=vector, limit=fetch, with_payload=_LIGHT_FIELDS
                ).points
            for point in points:
                payload = point.payload or {}
                if (
                    payload.get("type") == _MARKER_TYPE
                    or (exclude_step is not None and payload.get("step") == exclude_step)
                    or (scope is not None and payload.get("scope") != scope)
                    or (types is not None and payload.get("type") not in types)
                ):
                    continue
                scores.setdefault(str(point.id), float(point.score))
            if len(scores) >= limit or len(points) < fetch or fetch >= self._max_fetch:
                break
            fetch = min(fetch * 4, self._max_fetch)
        best = sorted(scores.items(), key=lambda item: item[1], reverse=True)[:limit]
        documents = self._retrieve_documents([point_id for point_id, _ in best])
        return [
            MemoryHit(id=point_id, score=score, document=documents[point_id])
            for point_id, score in best
            if point_id in documents
        ]

    def recent_summaries(self, scope: str, before_step: int, count: int) -> list[MemoryDocument]:
        """The summaries of the last ``count`` steps before ``before_step``, oldest first.

        Steps without a summary are skipped; ids are probed backwards in windows, so the
        cost grows with the steps probed, never with the size of the memory.
        """
        found: list[MemoryDocument] = []
        high = before_step - 1
        window = max(count, 8)
        while high >= 0 and len(found) < count:
            steps = list(range(high, max(-1, high - window), -1))
            summaries = self._summaries(scope, steps)
            found.extend(summaries[s] for s in steps if s in summaries)
            high = steps[-1] - 1
        return list(reversed(found[:count]))

    def _summaries(self, scope: str, steps: Sequence[int]) -> dict[int, MemoryDocument]:
        ids = {
            (step, doc_type, key): document_id(doc_type, scope, step, key)
            for step in steps
            for doc_type, key in SUMMARY_IDENTITIES
        }
        documents = self._retrieve_documents(list(ids.values()))
        result: dict[int, MemoryDocument] = {}
        for step in steps:
            for doc_type, key in SUMMARY_IDENTITIES:
                document = documents.get(ids[(step, doc_type, key)])
                if document is not None:
                    result[step] = document
                    break
        return result

    def _retrieve_documents(self, ids: list[str]) -> dict[str, MemoryDocument]:
        """Documents by id: the searchable ones, else those stored by id only."""
        if not ids:
            return {}
        with self._lock:
            points = self._qdrant.retrieve(self._memory, ids=ids, with_payload=True)
        found = {str(p.id): MemoryDocument.model_validate(p.payload or {}) for p in points}
        rest = [i for i in ids if i not in found]
        if rest:
            with self._lock:
                points = self._qdrant.retrieve(self._analyses, ids=rest, with_payload=True)
            found.update(
                (str(p.id), MemoryDocument.model_validate(p.payload))
                for p in points
                if p.payload and "type" in p.payload
            )
        return found

    # -- hacks the rubric canary re-scores ---------------------------------------
    def put_hack_index(self, scope: str, step: int, rollout_ids: Sequence[str]) -> None:
        """Record which of the step's findings carry a re-scorable hack (a probe with a
        reference), most severe first: the canary finds them by id, without a scan."""
        point = models.PointStruct(
            id=_hacks_id(scope, step),
            vector={},
            payload={"scope": scope, "step": step, "hacks": list(rollout_ids)},
        )
        with self._lock:
            self._qdrant.upsert(self._analyses, points=[point])

    def recent_hacks(
        self, scope: str, before_step: int, count: int, lookback: int = HACK_LOOKBACK_STEPS
    ) -> list[HackProbe]:
        """The probes of the ``count`` most recent re-scorable hacks of ``scope`` before
        ``before_step`` (newest step first, most severe first within a step), looking
        back at most ``lookback`` steps: a few ``retrieve`` calls of known ids."""
        wanted: list[str] = []
        high, low = before_step - 1, max(-1, before_step - 1 - lookback)
        while high > low and len(wanted) < count:
            steps = list(range(high, max(low, high - _HACK_WINDOW), -1))
            with self._lock:
                points = self._qdrant.retrieve(
                    self._analyses, ids=[_hacks_id(scope, s) for s in steps], with_payload=True
                )
            by_step = {int((p.payload or {})["step"]): (p.payload or {})["hacks"] for p in points}
            wanted += [
                document_id("finding", scope, s, str(rollout_id))
                for s in steps
                for rollout_id in by_step.get(s, [])
            ]
            high = steps[-1] - 1
        wanted = wanted[:count]
        documents = self._retrieve_documents(wanted)
        return [
            probe
            for point_id in wanted
            if (document := documents.get(point_id)) is not None
            and (probe := document.probe) is not None
        ]

    # -- inspection (offline tools: these scroll the whole digest) -------------
    def _scroll(self, fields: list[str], limit_points: int | None) -> Iterator[models.Record]:
        """Every document's point: the searchable ones, then those stored by id only
        (among the analyses: the points with a ``type``)."""
        seen = 0
        for collection in (self._memory, self._analyses):
            offset: Any = None
            while limit_points is None or seen < limit_points:
                page = 256 if limit_points is None else min(256, limit_points - seen)
                # "type" too, or the embedder marker below could not be told apart.
                with self._lock:
                    points, offset = self._qdrant.scroll(
                        collection, limit=page, offset=offset, with_payload=[*fields, "type"]
                    )
                for point in points:
                    kind = (point.payload or {}).get("type")
                    if kind is not None and kind != _MARKER_TYPE:
                        yield point
                seen += len(points)
                if offset is None:
                    break

    def counts_by_type_and_step(self, limit_points: int | None = None) -> dict[str, dict[int, int]]:
        """Documents per type and step, reading at most ``limit_points`` points.

        A scroll of the digest: for the CLI and benchmarks, not the request or step path.
        """
        counts: dict[str, dict[int, int]] = {}
        for point in self._scroll(["type", "step"], limit_points):
            payload = point.payload or {}
            per_step = counts.setdefault(str(payload.get("type")), {})
            step = int(payload.get("step", -1))
            per_step[step] = per_step.get(step, 0) + 1
        return counts

    def recent(self, limit: int) -> list[MemoryDocument]:
        """The ``limit`` latest documents, newest first (a scroll of the digest; inspection)."""
        latest = heapq.nlargest(
            limit,
            (
                (float((p.payload or {}).get("created_at", 0.0)), str(p.id))
                for p in self._scroll(["created_at"], None)
            ),
        )
        documents = self._retrieve_documents([point_id for _, point_id in latest])
        return [documents[point_id] for _, point_id in latest if point_id in documents]

    # -- analyses --------------------------------------------------------------
    def put_analyses(self, scope: str, step: int, items: Sequence[tuple[str, JSONObject]]) -> None:
        """Store the full analysis of each ``(rollout_id, analysis)`` (the analyzer's
        ``IndividualAnalysis`` as JSON), replacing older ones."""
        if not items:
            return
        points = [
            models.PointStruct(
                id=_analysis_id(scope, step, rollout_id),
                vector={},
                payload={
                    "scope": scope,
                    "step": step,
                    "rollout_id": rollout_id,
                    "analysis": analysis,
                },
            )
            for rollout_id, analysis in items
        ]
        with self._lock:
            self._qdrant.upsert(self._analyses, points=points)

    def get_analyses(
        self, scope: str, step: int, rollout_ids: Sequence[str]
    ) -> dict[str, JSONObject]:
        """The stored analyses of these rollouts, by rollout id (missing ones left out): JSON
        of the analyzer's schema when each was stored, an older version's included."""
        if not rollout_ids:
            return {}
        ids = [_analysis_id(scope, step, rollout_id) for rollout_id in rollout_ids]
        with self._lock:
            points = self._qdrant.retrieve(self._analyses, ids=ids, with_payload=True)
        payloads = [point.payload or {} for point in points]
        return {str(p["rollout_id"]): dict(p["analysis"]) for p in payloads}

    def drop_analyses(self, scope: str, step: int, rollout_ids: Sequence[str]) -> None:
        """Delete these analyses (retention); absent ones are ignored."""
        if not rollout_ids:
            return
        ids: list[models.ExtendedPointId] = [
            _analysis_id(scope, step, rollout_id) for rollout_id in rollout_ids
        ]
        with self._lock:
            delete_points(self._qdrant, self._analyses, ids)
