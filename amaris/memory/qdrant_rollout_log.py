"""The rollout log in Qdrant: the shared store's (a Qdrant server, several replicas).

``<prefix>_rollouts`` (payload only) holds one point per rollout. A step is read back by
retrieving ids in order, never by a filter or a scan, so the cost of a step does not
grow with the run.

Ids are ``uuid5("rollout/<step>/<seq>")``, ``seq`` counting 0, 1, 2... within a step, for
a process that is the only writer. Replicas sharing a Qdrant server each write their own
sequence, ``uuid5("rollout/<step>/<writer>/<seq>")``, and register ``(step, writer,
count)`` in ``<prefix>_step_writers``: a step's rollouts are the union of its writers'
sequences, and its count their sum, so no replica's memory is needed to read or count a
step. A writer's next ``seq`` lives in its memory and is recovered after a restart by
probing ids.

Embedded Qdrant commits every point of an upsert in a SQLite transaction of its own, so
the embedded store's log is :class:`~amaris.memory.sqlite_rollout_log.SqliteRolloutLog`
instead (:mod:`amaris.memory.rollout_backend` chooses); an embedded folder written before
still holds this collection, read here once to import it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

from qdrant_client import QdrantClient, models

from amaris.memory.qdrant import delete_points, ensure_collection, ensure_payload_index
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import ID_NAMESPACE, write_archive

_BATCH = 256


def _rollout_id(step: int, seq: int, writer: str = "") -> str:
    name = f"rollout/{step}/{writer}/{seq}" if writer else f"rollout/{step}/{seq}"
    return str(uuid.uuid5(ID_NAMESPACE, name))


def _writer_id(step: int, writer: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"writer/{step}/{writer}"))


class QdrantRolloutLog:
    """Append-only rollout records per step in a Qdrant collection, read back in order by id.

    ``writer``: empty for the one process of an embedded store; a distinct name per
    replica when several share a Qdrant server (see the module docstring).
    """

    def __init__(self, client: QdrantClient, prefix: str, writer: str = "") -> None:
        self._qdrant = client
        self._collection = f"{prefix}_rollouts"
        self._writers = f"{prefix}_step_writers"
        self.writer = writer
        self._next: dict[int, int] = {}
        self._lock = threading.Lock()
        ensure_collection(client, self._collection, None)
        # A reader of a store replicas wrote (e.g. `amaris export`) sees their writers too.
        self._multi = bool(writer) or client.collection_exists(self._writers)
        if writer:
            ensure_collection(client, self._writers, None)
            ensure_payload_index(client, self._writers, "step")

    def _next_seq(self, step: int, writer: str | None = None) -> int:
        # Caller holds the lock. Another writer's count is probed, never cached.
        writer = self.writer if writer is None else writer
        known = self._next.get(step) if writer == self.writer else None
        if known is not None:
            return known
        start = 0
        while True:
            ids = [_rollout_id(step, seq, writer) for seq in range(start, start + _BATCH)]
            points = self._qdrant.retrieve(self._collection, ids=ids, with_payload=["seq"])
            if len(points) < _BATCH:
                # Past the last record even if a crash left a hole below it.
                last = max((int((p.payload or {})["seq"]) for p in points), default=start - 1)
                if writer == self.writer:
                    self._next[step] = last + 1
                return last + 1
            start += _BATCH

    def append(self, step: int, record: RolloutRecord) -> int:
        """Store one record durably.

        Returns:
            Its sequence number within the step.
        """
        return self.append_many([(step, record)])[0]

    def append_many(self, items: Sequence[tuple[int, RolloutRecord]]) -> list[int]:
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
                        id=_rollout_id(step, seq, self.writer),
                        vector={},
                        payload={"step": step, "seq": seq, "record": record.to_json(seq=False)},
                    )
                )
            try:
                self._qdrant.upsert(self._collection, points=points)
                if self.writer:
                    # After the records: a count never names a record that is not stored.
                    self._qdrant.upsert(
                        self._writers,
                        points=[
                            models.PointStruct(
                                id=_writer_id(step, self.writer),
                                vector={},
                                payload={"step": step, "writer": self.writer, "count": count},
                            )
                            for step, count in planned.items()
                        ],
                    )
            except BaseException:
                # Part of the batch may be stored: recover these steps by probing later.
                for step in planned:
                    self._next.pop(step, None)
                raise
            self._next.update(planned)
            return seqs

    def _step_writers(self, step: int) -> dict[str, int]:
        """Caller holds the lock. Writer -> count of every writer of ``step``: the embedded
        writer ``""`` always, and the replicas registered in the writers collection."""
        counts = {"": self._next_seq(step, "")} if not self.writer else {}
        if self._multi:
            points, _ = self._qdrant.scroll(
                self._writers,
                limit=10_000,
                with_payload=True,
                scroll_filter=models.Filter(
                    must=[models.FieldCondition(key="step", match=models.MatchValue(value=step))]
                ),
            )
            for point in points:
                payload = point.payload or {}
                counts[str(payload["writer"])] = int(payload["count"])
            if self.writer:
                # Its own count is exact in memory (its latest write may be in flight).
                counts[self.writer] = self._next_seq(step)
        return counts

    def count(self, step: int) -> int:
        """Records appended to ``step`` by every writer."""
        with self._lock:
            return sum(self._step_writers(step).values())

    def load_step(self, step: int) -> list[RolloutRecord]:
        """Every record of ``step``, by writer then append order, each with its ``seq``:
        the sequence number :meth:`append` returned for it, after the numbers of the
        writers sorted before its own (``offset + seq``, each writer's range as long as
        its count), so numbers are unique within the step. With one writer (the embedded
        store's ``""``, or one replica) that is the number ``append`` returned; a hole a
        crash left keeps its number unused (``0, 2, 3``), so a record keeps its number in
        ``/steps`` and exports, and the largest is below :meth:`count`."""
        with self._lock:
            writers = self._step_writers(step)
        records: list[RolloutRecord] = []
        offset = 0
        for writer in sorted(writers):
            found: dict[int, RolloutRecord] = {}
            total = writers[writer]
            for start in range(0, total, _BATCH):
                ids = [
                    _rollout_id(step, seq, writer)
                    for seq in range(start, min(start + _BATCH, total))
                ]
                with self._lock:
                    points = self._qdrant.retrieve(self._collection, ids=ids, with_payload=True)
                for point in points:
                    payload = point.payload or {}
                    seq = int(payload["seq"])
                    found[seq] = RolloutRecord.model_validate(
                        {**payload["record"], "seq": offset + seq}
                    )
            records.extend(found[seq] for seq in sorted(found))
            offset += total
        return records

    def drop_step(self, step: int) -> int:
        """Delete every record of ``step`` (retention), of every writer.

        Returns:
            How many sequence numbers were deleted.
        """
        with self._lock:
            writers = self._step_writers(step)
            for writer, total in writers.items():
                for start in range(0, total, _BATCH):
                    ids: list[models.ExtendedPointId] = [
                        _rollout_id(step, seq, writer)
                        for seq in range(start, min(start + _BATCH, total))
                    ]
                    delete_points(self._qdrant, self._collection, ids)
            if self._multi:
                delete_points(
                    self._qdrant, self._writers, [_writer_id(step, writer) for writer in writers]
                )
            # Probing finds nothing now; forgetting the step keeps this dict small.
            self._next.pop(step, None)
            return sum(writers.values())

    def archive_step(self, step: int, folder: Path) -> Path:
        """Write the records of ``step`` to ``<folder>/step-<N:06d>.jsonl`` atomically.

        Returns:
            The file written.
        """
        return write_archive(self.load_step(step), folder, step)

    def close(self) -> None:
        """Nothing to release: the Qdrant client belongs to whoever opened it."""
