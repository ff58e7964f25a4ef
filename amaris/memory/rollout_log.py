"""Durable log of every scored rollout, per training step, and the state of each step.

:class:`RolloutLog` is what the service needs of the log; two backends provide it, chosen
by configuration in one place (:func:`amaris.memory.rollout_backend.open_rollout_log`):

- the embedded store (no ``memory.qdrant_url``, one process): SQLite in the data folder,
  one transaction per batch (:mod:`amaris.memory.sqlite_rollout_log`);
- the shared store (a Qdrant server, or several replicas with their own sequences):
  a Qdrant collection (:mod:`amaris.memory.qdrant_rollout_log`).

Steps past ``memory.rollout_retention_steps`` leave the log for JSONL archives
(:func:`archive_path`); :func:`step_records` reads a step from either. The step registry
(:class:`StepRegistry`, one point per step) stays in Qdrant in both.
"""

from __future__ import annotations

import builtins
import json
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from qdrant_client import QdrantClient, models

from amaris.atomic import replace_file
from amaris.memory.models import StepRecord
from amaris.memory.qdrant import ensure_collection
from amaris.memory.records import RolloutRecord

ID_NAMESPACE = uuid.UUID("9a3e6c1d-54b7-4f02-8e1a-c7d2b5f60a18")
"""Namespace of the uuid5 point ids of the rollout log and the step registry."""


def _step_id(step: int) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"step/{step}"))


class RolloutLog(Protocol):
    """Append-only rollout records per step, numbered 0, 1, 2... in append order.

    Every method blocks (callers on the event loop use a thread) and is safe to call from
    several threads.
    """

    def append(self, step: int, record: RolloutRecord) -> int:
        """Store one record durably; its sequence number within the step."""
        ...

    def append_many(self, items: Sequence[tuple[int, RolloutRecord]]) -> list[int]:
        """Store ``(step, record)`` pairs durably in one write; their sequence numbers."""
        ...

    def count(self, step: int) -> int:
        """Records appended to ``step`` (sequence numbers used, by every writer)."""
        ...

    def load_step(self, step: int) -> list[RolloutRecord]:
        """Every record of ``step`` in order, each with its ``seq``: the sequence number it
        was stored under (``append``'s), not its position, so a hole (a record a crash
        never stored) stays a gap (``0, 2, 3``) and a record keeps its number wherever it
        is read (``/steps``, exports, archives); each below :meth:`count`."""
        ...

    def drop_step(self, step: int) -> int:
        """Delete every record of ``step`` (retention); how many sequence numbers went."""
        ...

    def archive_step(self, step: int, folder: Path) -> Path:
        """Write the records of ``step`` to ``<folder>/step-<N:06d>.jsonl`` atomically."""
        ...

    def close(self) -> None:
        """Release what the log opened itself."""
        ...


def write_archive(records: list[RolloutRecord], folder: Path, step: int) -> Path:
    """Write ``records`` to ``<folder>/step-<N:06d>.jsonl`` atomically (fsynced under a
    temporary name, then renamed).

    Returns:
        The file written.
    """
    target = folder / f"step-{step:06d}.jsonl"
    lines = (json.dumps(record.to_json(), ensure_ascii=False) + "\n" for record in records)
    replace_file(target, lines, durable=True)
    return target


def archive_path(data_path: Path, step: int) -> Path:
    """Where retention archives the records of ``step`` (``<memory.path>/rollouts``)."""
    return Path(data_path) / "rollouts" / f"step-{step:06d}.jsonl"


def step_records(rollouts: RolloutLog, data_path: Path, step: int) -> list[RolloutRecord]:
    """Every record of ``step`` in append order: from the rollout log, else its archive."""
    records = rollouts.load_step(step)
    if records:
        return records
    archive = archive_path(data_path, step)
    if not archive.is_file():
        return []
    # Lines end at "\n" only: records hold text with U+2028 and the like raw (ensure_ascii
    # off), which splitlines() would take for line breaks.
    lines = archive.read_text(encoding="utf-8").split("\n")
    return [RolloutRecord.loads(line) for line in lines if line.strip()]


class StepRegistry:
    """One record per training step: where its evolution stands.

    Records are :class:`StepRecord` (``step``, ``status`` in
    ``open|completing|done|failed``, ``rollout_count``, ``flow_run_id``,
    ``rubric_versions``, ``error``, ``updated_at``, ``mode``, a run's ``scopes``...),
    stored as its JSON.
    """

    def __init__(self, client: QdrantClient, prefix: str) -> None:
        self._qdrant = client
        self._collection = f"{prefix}_steps"
        self._lock = threading.Lock()
        ensure_collection(client, self._collection, None)

    def get(self, step: int) -> StepRecord | None:
        """The record of ``step``; None if the step was never registered."""
        with self._lock:
            return self._get(step)

    def _get(self, step: int) -> StepRecord | None:
        points = self._qdrant.retrieve(self._collection, ids=[_step_id(step)], with_payload=True)
        if not points:
            return None
        return StepRecord.model_validate(points[0].payload or {})

    def set(self, step: int, **fields: object) -> StepRecord:
        """Change fields of ``step``'s record (created with defaults if absent).

        Returns:
            The record as stored.

        Raises:
            pydantic.ValidationError: an invalid value of a known field (e.g. a status).
        """
        with self._lock:
            current = self._get(step)
            stored = current.model_dump(mode="json") if current is not None else {}
            record = StepRecord.model_validate(
                {**stored, **fields, "step": step, "updated_at": time.time()}
            )
            self._qdrant.upsert(
                self._collection,
                points=[
                    models.PointStruct(
                        id=_step_id(step), vector={}, payload=record.model_dump(mode="json")
                    )
                ],
            )
            return record

    def list(
        self, statuses: builtins.set[str] | None = None, limit: int | None = None
    ) -> builtins.list[StepRecord]:
        """Records with one of ``statuses`` (None = all), by step; ``limit`` keeps the latest.

        A scroll: acceptable because the collection has one point per step (thousands at
        most), unlike the rollout log.
        """
        records: builtins.list[StepRecord] = []
        offset: Any = None
        with self._lock:
            while True:
                points, offset = self._qdrant.scroll(
                    self._collection, limit=256, offset=offset, with_payload=True
                )
                for point in points:
                    record = StepRecord.model_validate(point.payload or {})
                    if statuses is None or record.status in statuses:
                        records.append(record)
                if offset is None:
                    break
        records.sort(key=lambda r: r.step)
        if limit is None:
            return records
        return records[-limit:] if limit > 0 else []
