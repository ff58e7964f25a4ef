"""Durable log of every scored rollout, per training step, and the state of each step.

``<prefix>_rollouts`` (payload only) holds one point per rollout with the id
``uuid5("rollout/<step>/<seq>")``, ``seq`` counting 0, 1, 2... within a step. A step is
read back by retrieving its ids in order, never by a filter or a scan, so the cost of
a step does not grow with the run. The next ``seq`` of a step lives in memory and is
recovered after a restart by probing ids. One process writes a prefix (the service;
embedded Qdrant allows only one anyway): two writers of one step would reuse seqs.
"""

from __future__ import annotations

import builtins
import json
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qdrant_client import QdrantClient, models

from amaris.memory.models import StepRecord
from amaris.qdrant import delete_points, ensure_collection

_NAMESPACE = uuid.UUID("9a3e6c1d-54b7-4f02-8e1a-c7d2b5f60a18")
_BATCH = 256


def _rollout_id(step: int, seq: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"rollout/{step}/{seq}"))


def _step_id(step: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"step/{step}"))


class RolloutLog:
    """Append-only rollout records per step, read back in order by id."""

    def __init__(self, client: QdrantClient, prefix: str) -> None:
        self._client = client
        self._collection = f"{prefix}_rollouts"
        self._next: dict[int, int] = {}
        self._lock = threading.Lock()
        ensure_collection(client, self._collection, None)

    def _next_seq(self, step: int) -> int:
        # Caller holds the lock.
        known = self._next.get(step)
        if known is not None:
            return known
        start = 0
        while True:
            ids = [_rollout_id(step, seq) for seq in range(start, start + _BATCH)]
            points = self._client.retrieve(self._collection, ids=ids, with_payload=["seq"])
            if len(points) < _BATCH:
                # Past the last record even if a crash left a hole below it.
                last = max((int((p.payload or {})["seq"]) for p in points), default=start - 1)
                self._next[step] = last + 1
                return last + 1
            start += _BATCH

    def append(self, step: int, record: dict[str, Any]) -> int:
        """Store one record durably.

        Returns:
            Its sequence number within the step.
        """
        return self.append_many([(step, record)])[0]

    def append_many(self, items: Sequence[tuple[int, dict[str, Any]]]) -> list[int]:
        """Store ``(step, record)`` pairs in one write.

        Returns:
            Their sequence numbers, in order.
        """
        if not items:
            return []
        with self._lock:
            seqs: list[int] = []
            points: list[models.PointStruct] = []
            planned: dict[int, int] = {}
            for step, record in items:
                seq = planned.get(step)
                if seq is None:
                    seq = self._next_seq(step)
                planned[step] = seq + 1
                seqs.append(seq)
                points.append(
                    models.PointStruct(
                        id=_rollout_id(step, seq),
                        vector={},
                        payload={"step": step, "seq": seq, "record": record},
                    )
                )
            try:
                self._client.upsert(self._collection, points=points)
            except BaseException:
                # Part of the batch may be stored: recover these steps by probing later.
                for step in planned:
                    self._next.pop(step, None)
                raise
            self._next.update(planned)
            return seqs

    def count(self, step: int) -> int:
        """Records appended to ``step`` (its next sequence number)."""
        with self._lock:
            return self._next_seq(step)

    def load_step(self, step: int) -> list[dict[str, Any]]:
        """Every record of ``step``, in append order, each with its ``seq``."""
        with self._lock:
            total = self._next_seq(step)
        found: dict[int, dict[str, Any]] = {}
        for start in range(0, total, _BATCH):
            ids = [_rollout_id(step, seq) for seq in range(start, min(start + _BATCH, total))]
            with self._lock:
                points = self._client.retrieve(self._collection, ids=ids, with_payload=True)
            for point in points:
                payload = point.payload or {}
                found[int(payload["seq"])] = {**payload["record"], "seq": int(payload["seq"])}
        return [found[seq] for seq in sorted(found)]

    def drop_step(self, step: int) -> int:
        """Delete every record of ``step`` (retention).

        Returns:
            How many sequence numbers were deleted.
        """
        with self._lock:
            total = self._next_seq(step)
            for start in range(0, total, _BATCH):
                ids: list[models.ExtendedPointId] = [
                    _rollout_id(step, seq) for seq in range(start, min(start + _BATCH, total))
                ]
                delete_points(self._client, self._collection, ids)
            # Probing finds nothing now; forgetting the step keeps this dict small.
            self._next.pop(step, None)
            return total

    def archive_step(self, step: int, folder: Path) -> Path:
        """Write the records of ``step`` to ``<folder>/step-<N:06d>.jsonl`` atomically.

        Returns:
            The file written.
        """
        records = self.load_step(step)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"step-{step:06d}.jsonl"
        tmp = target.with_name(f".{target.name}.tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        return target


class StepRegistry:
    """One record per training step: where its evolution stands.

    Records are plain dicts with the fields of :class:`StepRecord` (``step``, ``status``
    in ``open|completing|done|failed``, ``rollout_count``, ``flow_run_id``,
    ``rubric_versions``, ``error``, ``updated_at``, ``mode``) plus any field a caller sets.
    """

    def __init__(self, client: QdrantClient, prefix: str) -> None:
        self._client = client
        self._collection = f"{prefix}_steps"
        self._lock = threading.Lock()
        ensure_collection(client, self._collection, None)

    def get(self, step: int) -> dict[str, Any] | None:
        """The record of ``step``; None if the step was never registered."""
        with self._lock:
            return self._get(step)

    def _get(self, step: int) -> dict[str, Any] | None:
        points = self._client.retrieve(self._collection, ids=[_step_id(step)], with_payload=True)
        if not points:
            return None
        return dict(points[0].payload or {})

    def set(self, step: int, **fields: Any) -> dict[str, Any]:
        """Change fields of ``step``'s record (created with defaults if absent).

        Returns:
            The record as stored.

        Raises:
            pydantic.ValidationError: an invalid value of a known field (e.g. a status).
        """
        with self._lock:
            current = self._get(step) or {}
            merged = {**current, **fields, "step": step, "updated_at": time.time()}
            record = StepRecord.model_validate(merged).model_dump(mode="json")
            self._client.upsert(
                self._collection,
                points=[models.PointStruct(id=_step_id(step), vector={}, payload=record)],
            )
            return record

    def list(
        self, statuses: builtins.set[str] | None = None, limit: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Records with one of ``statuses`` (None = all), by step; ``limit`` keeps the latest.

        A scroll: acceptable because the collection has one point per step (thousands at
        most), unlike the rollout log.
        """
        records: builtins.list[dict[str, Any]] = []
        offset: Any = None
        with self._lock:
            while True:
                points, offset = self._client.scroll(
                    self._collection, limit=256, offset=offset, with_payload=True
                )
                for point in points:
                    record = dict(point.payload or {})
                    if statuses is None or record.get("status") in statuses:
                        records.append(record)
                if offset is None:
                    break
        records.sort(key=lambda r: int(r["step"]))
        if limit is None:
            return records
        return records[-limit:] if limit > 0 else []
