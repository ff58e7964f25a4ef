"""The embedded store's rollout log (:class:`SqliteRolloutLog`) through what the service
asks of it (:class:`RolloutLog`): numbering per step across batches and reopenings, all or
nothing per batch, several threads, retention's drop and archive, imports (records read
elsewhere, a data folder whose rollouts are still in Qdrant). A real SQLite file under
pytest's ``tmp_path``, Qdrant in memory; no fixture of tests/conftest.py (mutation testing
runs it with ``--noconftest``: bench/evaluations/mutation.py ``rollout_log``)."""

from __future__ import annotations

import json
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.memory.qdrant_rollout_log import QdrantRolloutLog, _rollout_id
from amaris.memory.records import LoggedRollout, RolloutRecord
from amaris.memory.rollout_log import RolloutLog
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog, import_qdrant_rollouts


def record_json(i: int) -> dict[str, Any]:
    """A record as the log stores it. Keys sorting before and after "seq", a field the
    record model does not know, and text that is not ASCII."""
    return {
        "rollout": {"id": f"r{i}", "output": f"réponse {i} ✓"},
        "score": i / 10,
        "request_id": f"req-{i}",
        "tokens": i,
    }


def record(i: int, seq: int | None = None) -> RolloutRecord:
    found = record_json(i)
    return RolloutRecord.model_validate(found if seq is None else {**found, "seq": seq})


def stored(records: list[RolloutRecord]) -> list[dict[str, Any]]:
    return [r.to_json() for r in records]


def open_log(tmp_path: Path, prefix: str = "t") -> SqliteRolloutLog:
    return SqliteRolloutLog(tmp_path / "rollout_log.sqlite3", prefix)


def test_records_are_numbered_per_step_and_numbering_resumes_after_a_reopen(
    tmp_path: Path,
) -> None:
    log: RolloutLog = open_log(tmp_path)
    assert [log.append(7, record(i)) for i in range(3)] == [0, 1, 2]
    assert log.append_many(
        [(7, record(3)), (8, record(100)), (7, record(4)), (8, record(101))]
    ) == [
        3,
        0,
        4,
        1,
    ]
    assert (log.count(7), log.count(8), log.count(9)) == (5, 2, 0)
    assert log.append_many([]) == []
    log.close()

    log = open_log(tmp_path)
    assert log.append(7, record(5)) == 5  # the numbering is read back from the file
    assert log.append_many([(8, record(102)), (8, record(103))]) == [2, 3]
    assert (log.count(7), log.count(8), log.count(9)) == (6, 4, 0)
    assert stored(log.load_step(7)) == [{**record_json(i), "seq": i} for i in range(6)]
    assert [r.request_id for r in log.load_step(8)] == [f"req-{i}" for i in range(100, 104)]
    assert log.load_step(9) == []
    log.close()


def test_a_reopened_log_counts_a_step_before_any_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_many([(1, record(i)) for i in range(4)])
    log.close()
    log = open_log(tmp_path)
    assert log.count(1) == 4
    assert log.drop_step(1) == 4
    log.close()


def test_prefixes_sharing_a_file_keep_their_records_apart(tmp_path: Path) -> None:
    a, b = open_log(tmp_path, "a"), open_log(tmp_path, "b")
    a.append_many([(0, record(0)), (0, record(1))])
    assert b.append(0, record(9)) == 0
    assert (a.count(0), b.count(0)) == (2, 1)
    assert stored(b.load_step(0)) == [{**record_json(9), "seq": 0}]
    a.close()
    b.close()


def test_a_failed_batch_stores_none_of_its_records_and_the_log_goes_on(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_many([(7, record(i)) for i in range(3)])
    assert log.count(7) == 3
    # A second writer (never two in amaris: the Qdrant folder's lock keeps one process)
    # takes sequence numbers this log believes free, so its next batch conflicts.
    other = open_log(tmp_path)
    other.append_many([(7, record(3)), (7, record(4))])
    with pytest.raises(sqlite3.IntegrityError):
        log.append_many([(8, record(100)), (7, record(5))])
    assert log.load_step(8) == []  # the record before the conflict is not stored either
    assert log.count(8) == 0
    assert log.append(7, record(5)) == 5  # the numbering is read afresh
    assert log.append(8, record(100)) == 0
    assert [r.request_id for r in other.load_step(7)] == [f"req-{i}" for i in range(6)]
    other.close()
    log.close()


def test_several_threads_append_without_losing_or_sharing_a_number(tmp_path: Path) -> None:
    log: RolloutLog = open_log(tmp_path)

    def write(worker: int) -> list[int]:
        return [
            log.append(1, RolloutRecord(rollout=LoggedRollout(id=f"w{worker}-{i}")))
            for i in range(20)
        ]

    with ThreadPoolExecutor(4) as pool:
        seqs = [s for batch in pool.map(write, range(4)) for s in batch]
    assert sorted(seqs) == list(range(80))
    assert log.count(1) == 80
    found = log.load_step(1)
    assert sorted(r.rollout.id for r in found) == sorted(
        f"w{w}-{i}" for w in range(4) for i in range(20)
    )
    log.close()


def test_a_dropped_step_is_gone_for_good_and_numbered_afresh(tmp_path: Path) -> None:
    log: RolloutLog = open_log(tmp_path)
    log.append_many([(3, record(i)) for i in range(3)] + [(4, record(9))])
    assert log.drop_step(3) == 3
    assert (log.count(3), log.load_step(3), log.count(4)) == (0, [], 1)
    assert log.drop_step(5) == 0  # never written
    assert log.append(3, record(5)) == 0
    log.close()
    log = open_log(tmp_path)  # the drop is stored, not only in memory
    assert stored(log.load_step(3)) == [{**record_json(5), "seq": 0}]
    assert stored(log.load_step(4)) == [{**record_json(9), "seq": 0}]
    log.close()


def test_a_step_is_archived_as_json_lines_in_order(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    log: RolloutLog = open_log(tmp_path / "store")
    log.append_many([(3, record(i)) for i in range(3)] + [(4, record(9))])
    path = log.archive_step(3, tmp_path / "archive")
    assert path == tmp_path / "archive" / "step-000003.jsonl"
    lines = path.read_text(encoding="utf-8").split("\n")
    assert [json.loads(line) for line in lines if line] == [
        {**record_json(i), "seq": i} for i in range(3)
    ]
    assert log.count(3) == 3  # archiving is not dropping
    log.close()


def test_the_synchronous_level_is_the_one_asked_for(tmp_path: Path) -> None:
    full = open_log(tmp_path)
    assert full.synchronous == "full"
    normal = SqliteRolloutLog(tmp_path / "other.sqlite3", "t", "normal")
    assert normal.synchronous == "normal"
    full.close()
    normal.close()


def _handles(path: Path) -> int:
    """Open file descriptors of this process on ``path`` (or its -wal / -shm files)."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return sum(name.startswith(str(path)) for name in names)


def test_a_log_that_cannot_open_its_file_keeps_no_handle_on_it(tmp_path: Path) -> None:
    database = tmp_path / "rollout_log.sqlite3"
    database.write_bytes(b"not a database, " * 512)
    with pytest.raises(sqlite3.DatabaseError) as caught:
        SqliteRolloutLog(database, "t")
    assert "not a database" in str(caught.value)
    assert _handles(database) == 0


def test_imported_records_keep_their_numbers_and_a_second_import_adds_nothing(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    log.append(2, record(0))
    assert log.count(3) == 0
    steps = {
        2: [record(10, seq=0)],  # already here: left as it is
        3: [record(i, seq=i) for i in range(3)],
    }
    assert log.import_steps(steps) == 4
    assert log.count(3) == 3 and log.count(2) == 1
    assert stored(log.load_step(3)) == [{**record_json(i), "seq": i} for i in range(3)]
    assert stored(log.load_step(2)) == [{**record_json(0), "seq": 0}]
    assert log.import_steps(steps) == 4
    assert log.count(3) == 3
    assert log.append(3, record(3)) == 3
    log.close()


def test_after_a_gap_each_record_keeps_its_number(tmp_path: Path) -> None:
    # The numbers are the ids: load_step does not renumber by position (append returns 3
    # and the record reads back as 3, not 2).
    log = open_log(tmp_path)
    log.import_steps({5: [record(0, seq=0), record(2, seq=2)]})  # a Qdrant log's hole
    assert log.count(5) == 3
    assert log.append(5, record(3)) == 3
    expected = [{**record_json(i), "seq": i} for i in (0, 2, 3)]
    assert stored(log.load_step(5)) == expected
    log.close()
    reopened = open_log(tmp_path)
    assert stored(reopened.load_step(5)) == expected
    assert reopened.append(5, record(4)) == 4
    archived = reopened.archive_step(5, tmp_path / "archive").read_text(encoding="utf-8")
    assert [json.loads(line)["seq"] for line in archived.splitlines()] == [0, 2, 3, 4]
    reopened.close()


def test_a_hole_in_a_qdrant_log_keeps_its_number_through_the_import(tmp_path: Path) -> None:
    client = QdrantClient(":memory:")
    QdrantRolloutLog(client, "amaris").append_many([(0, record(i)) for i in range(3)])
    client.delete("amaris_rollouts", points_selector=[_rollout_id(0, 1)])  # never stored
    log = open_log(tmp_path, "amaris")
    assert import_qdrant_rollouts(log, client, "amaris") == 2
    assert [r.seq for r in log.load_step(0)] == [0, 2]
    assert log.append(0, record(3)) == 3
    assert [r.seq for r in log.load_step(0)] == [0, 2, 3]
    log.close()
    client.close()


def test_a_lone_surrogate_of_an_old_qdrant_record_is_imported_replaced(tmp_path: Path) -> None:
    # Records written by versions that accepted lone surrogates hold them (embedded Qdrant
    # keeps them); SQLite stores UTF-8, so kept raw they would fail the whole import.
    client = QdrantClient(":memory:")
    old = {"rollout": {"id": "r0", "output": "bad \ud800 text"}, "reason": "judge: \udfff"}
    QdrantRolloutLog(client, "amaris").append_many(
        [(0, RolloutRecord.model_validate(old)), (0, record(1))]
    )
    log = open_log(tmp_path, "amaris")
    assert import_qdrant_rollouts(log, client, "amaris") == 2
    loaded = log.load_step(0)
    assert (loaded[0].rollout.output, loaded[0].reason) == ("bad \ufffd text", "judge: \ufffd")
    assert stored(loaded[1:]) == [{**record_json(1), "seq": 1}]
    archived = log.archive_step(0, tmp_path / "archive").read_text(encoding="utf-8")
    assert json.loads(archived.splitlines()[0])["rollout"]["output"] == "bad \ufffd text"
    log.close()
    client.close()


def test_text_is_stored_as_written_not_escaped(tmp_path: Path) -> None:
    # ensure_ascii off: an operator's sqlite3 shell finds the text as written (and CJK text
    # takes 3 bytes a character, not 6).
    log = open_log(tmp_path)
    log.append(0, record(0))
    log.close()
    with sqlite3.connect(tmp_path / "rollout_log.sqlite3") as db:
        (text,) = db.execute('SELECT record FROM "t_rollouts"').fetchone()
    db.close()
    assert "réponse 0 ✓" in text
    assert json.loads(text) == record_json(0)


def test_a_folder_without_rollouts_in_qdrant_imports_nothing() -> None:
    client = QdrantClient(":memory:")
    log = SqliteRolloutLog(":memory:", "amaris")
    assert import_qdrant_rollouts(log, client, "amaris") == 0
    assert log.count(0) == 0
    log.close()
    client.close()


def test_rollouts_still_in_qdrant_move_to_the_log_once(tmp_path: Path) -> None:
    client = QdrantClient(":memory:")
    # more than one page of the scroll (1024 points), many steps of one record
    steps = {0: [record(i) for i in range(1000)], **{s: [record(s)] for s in range(1, 150)}}
    items = [(step, r) for step, records in steps.items() for r in records]
    QdrantRolloutLog(client, "amaris").append_many(items)
    QdrantRolloutLog(client, "other").append(0, record(0))
    QdrantRolloutLog(client, "amaris", writer="r1")  # leaves amaris_step_writers behind
    assert client.collection_exists("amaris_step_writers")
    log = open_log(tmp_path, "amaris")

    assert import_qdrant_rollouts(log, client, "amaris") == len(items)
    for step, records in steps.items():
        assert log.count(step) == len(records)
    assert log.load_step(0)[999].to_json() == {**record_json(999), "seq": 999}
    assert stored(log.load_step(149)) == [{**record_json(149), "seq": 0}]
    assert not client.collection_exists("amaris_rollouts")  # moved, not copied
    assert not client.collection_exists("amaris_step_writers")
    assert client.collection_exists("other_rollouts")  # another prefix is not touched

    # A crash between the import's commit and the collection's deletion: importing again
    # adds nothing twice.
    QdrantRolloutLog(client, "amaris").append_many([(0, r) for r in steps[0][:5]])
    assert import_qdrant_rollouts(log, client, "amaris") == 5
    assert log.count(0) == 1000
    assert not client.collection_exists("amaris_rollouts")
    log.close()
    client.close()
