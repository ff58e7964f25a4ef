"""The embedded store's rollout log: SQLite in the data folder, one transaction per batch.

Embedded Qdrant commits every point of an upsert in a SQLite transaction of its own (a
rollback journal and its fsyncs per rollout), which would cost ``/score`` most of its CPU
and much of its latency under load. Here a whole batch of the group commit
(:mod:`amaris.memory.batched_append`) is one transaction, in write-ahead-log mode.

Durability: ``/score`` answers only once its record's commit returned. With
``synchronous=FULL`` (the default, ``memory.rollout_log_synchronous: full``) every commit
fsyncs the write-ahead log, so neither a crash of the process nor a power loss loses a
rollout a trainer got an answer for. ``NORMAL`` leaves the fsync to checkpoints: a
committed transaction survives a crash of the process (it is in the OS's cache), but a
power loss or OS crash may lose the last ones (never corrupting the file).
docs/benchmarks.md measures both.

One table per collection prefix, ``"<prefix>_rollouts"`` (step, seq, record as JSON), so
several prefixes share a data folder as their Qdrant collections do. A data folder
written before this log existed holds its rollouts in the Qdrant collection of the same
name: :func:`import_qdrant_rollouts` moves them here once.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from qdrant_client import QdrantClient

from amaris.memory.qdrant_rollout_log import QdrantRolloutLog
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import write_archive

Synchronous = Literal["full", "normal"]


class SqliteRolloutLog:
    """Append-only rollout records per step in one SQLite table (one writing process).

    Args:
        location: the database file, or ``":memory:"`` (tests with an in-memory store).
        prefix: ``memory.collection``; the table is ``<prefix>_rollouts``.
        synchronous: SQLite's ``synchronous`` (``memory.rollout_log_synchronous``; see
            the module docstring).
    """

    def __init__(
        self, location: Path | str, prefix: str, synchronous: Synchronous = "full"
    ) -> None:
        self._table = f'"{prefix}_rollouts"'
        self._next: dict[int, int] = {}
        self._lock = threading.Lock()
        # Autocommit mode: every transaction below is an explicit BEGIN ... COMMIT. One
        # connection used from worker threads, always under the lock.
        self._db = sqlite3.connect(str(location), isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.execute(
                f"CREATE TABLE IF NOT EXISTS {self._table} ("
                "step INTEGER NOT NULL, seq INTEGER NOT NULL, record TEXT NOT NULL, "
                "PRIMARY KEY (step, seq))"
            )
        except BaseException:
            self._db.close()
            raise

    @property
    def synchronous(self) -> str:
        """The ``synchronous`` level the database runs with (``full``, ``normal``...)."""
        with self._lock:
            (level,) = self._db.execute("PRAGMA synchronous").fetchone()
        return {0: "off", 1: "normal", 2: "full", 3: "extra"}[int(level)]

    def _next_seq(self, step: int) -> int:
        # Caller holds the lock.
        known = self._next.get(step)
        if known is None:
            row = self._db.execute(
                f"SELECT MAX(seq) FROM {self._table} WHERE step = ?", (step,)
            ).fetchone()
            known = self._next[step] = 0 if row[0] is None else int(row[0]) + 1
        return known

    def _write(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """``sql`` over ``rows`` in one transaction (caller holds the lock)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(sql, rows)
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def append(self, step: int, record: RolloutRecord) -> int:
        """Store one record durably.

        Returns:
            Its sequence number within the step.
        """
        return self.append_many([(step, record)])[0]

    def append_many(self, items: Sequence[tuple[int, RolloutRecord]]) -> list[int]:
        """Store ``(step, record)`` pairs in one transaction: all of them or none.

        Returns:
            Their sequence numbers, in order.
        """
        if not items:
            return []
        with self._lock:
            seqs: list[int] = []
            rows: list[tuple[int, int, str]] = []
            planned: dict[int, int] = {}
            for step, record in items:
                seq = planned.get(step)
                if seq is None:
                    seq = self._next_seq(step)
                planned[step] = seq + 1
                seqs.append(seq)
                rows.append((step, seq, record.dumps()))
            try:
                self._write(f"INSERT INTO {self._table} (step, seq, record) VALUES (?, ?, ?)", rows)
            except BaseException:
                # Nothing of the batch is stored: read these steps' numbering afresh.
                for step in planned:
                    self._next.pop(step, None)
                raise
            self._next.update(planned)
            return seqs

    def count(self, step: int) -> int:
        """Records appended to ``step``."""
        with self._lock:
            return self._next_seq(step)

    def load_step(self, step: int) -> list[RolloutRecord]:
        """Every record of ``step`` in append order, each with its ``seq``: the sequence
        number :meth:`append` returned for it (or it was imported under), not its position.
        A step with a hole (a record imported from a Qdrant log a crash left one in) reads
        back as ``0, 2, 3``: a record keeps its number in ``/steps`` and exports."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT seq, record FROM {self._table} WHERE step = ? ORDER BY seq", (step,)
            ).fetchall()
        return [RolloutRecord.loads(text, int(seq)) for seq, text in rows]

    def drop_step(self, step: int) -> int:
        """Delete every record of ``step`` (retention).

        Returns:
            How many sequence numbers were deleted.
        """
        with self._lock:
            used = self._next_seq(step)
            self._write(f"DELETE FROM {self._table} WHERE step = ?", [(step,)])
            self._next.pop(step, None)
            return used

    def archive_step(self, step: int, folder: Path) -> Path:
        """Write the records of ``step`` to ``<folder>/step-<N:06d>.jsonl`` atomically.

        Returns:
            The file written.
        """
        return write_archive(self.load_step(step), folder, step)

    def import_steps(self, steps: dict[int, list[RolloutRecord]]) -> int:
        """Store records read elsewhere under their ``seq``, in one transaction; a record
        whose ``(step, seq)`` is already here is left as it is (so importing twice is
        importing once).

        Returns:
            How many records were given.
        """
        rows = [
            (
                step,
                int(record.seq or 0),
                record.dumps(),
            )
            for step, records in steps.items()
            for record in records
        ]
        with self._lock:
            self._write(
                f"INSERT OR IGNORE INTO {self._table} (step, seq, record) VALUES (?, ?, ?)", rows
            )
            for step in steps:
                self._next.pop(step, None)
        return len(rows)

    def close(self) -> None:
        """Close the database (every committed record is already durable)."""
        with self._lock:
            self._db.close()


def import_qdrant_rollouts(log: SqliteRolloutLog, client: QdrantClient, prefix: str) -> int:
    """Move the rollouts an earlier amaris wrote to this embedded store's Qdrant collection
    ``<prefix>_rollouts`` into ``log``, then delete that collection (and
    ``<prefix>_step_writers``, if any).

    Idempotent: the records are stored in one transaction under their sequence numbers
    before the collections go, so a crash in between only repeats the import at the next
    open, which adds nothing twice.

    Returns:
        How many records were imported (0 when there was no such collection).
    """
    collection = f"{prefix}_rollouts"
    if not client.collection_exists(collection):
        return 0
    steps: set[int] = set()
    offset: Any = None
    while True:
        points, offset = client.scroll(collection, limit=1024, offset=offset, with_payload=["step"])
        steps.update(int((point.payload or {})["step"]) for point in points)
        if offset is None:
            break
    old = QdrantRolloutLog(client, prefix)
    imported = log.import_steps({step: old.load_step(step) for step in sorted(steps)})
    client.delete_collection(collection)
    if client.collection_exists(f"{prefix}_step_writers"):
        client.delete_collection(f"{prefix}_step_writers")
    return imported
