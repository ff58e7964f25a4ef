"""The rollout log (both backends: SQLite, and a Qdrant collection in real local mode) and
the step registry."""

from __future__ import annotations

import gc
import json
import os
import tracemalloc
from pathlib import Path

import pytest
from pydantic import ValidationError
from qdrant_client import QdrantClient, models

from amaris.memory.qdrant import delete_points, ensure_collection, is_local
from amaris.memory.qdrant_rollout_log import QdrantRolloutLog, _rollout_id
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import StepRegistry
from tests.support.rollout_logs import KINDS, LogFolder


def _json(i: int) -> dict[str, object]:
    """A record as the log stores it (JSON)."""
    return {
        "rollout": {"id": f"r{i}", "output": f"answer {i}"},
        "score": i / 10,
        "request_id": f"req-{i}",
    }


def _record(i: int) -> RolloutRecord:
    return RolloutRecord.model_validate(_json(i))


def _stored(records: list[RolloutRecord]) -> list[dict[str, object]]:
    return [r.to_json() for r in records]


@pytest.mark.parametrize("kind", KINDS)
def test_rollouts_survive_a_restart_and_numbering_resumes(kind: str, tmp_path: Path) -> None:
    folder = LogFolder(kind, tmp_path)
    log = folder.open()
    assert [log.append(7, _record(i)) for i in range(3)] == [0, 1, 2]
    assert log.append_many([(7, _record(3)), (8, _record(100)), (7, _record(4))]) == [3, 0, 4]
    assert (log.count(7), log.count(8), log.count(9)) == (5, 1, 0)
    folder.close()

    log = folder.open()
    assert log.count(7) == 5  # recovered from the store
    assert log.append(7, _record(5)) == 5
    assert log.append(8, _record(101)) == 1
    assert [r.request_id for r in log.load_step(7)] == [f"req-{i}" for i in range(6)]
    assert _stored(log.load_step(8)) == [{**_json(100), "seq": 0}, {**_json(101), "seq": 1}]
    assert log.load_step(9) == []
    folder.close()


@pytest.mark.parametrize("kind", KINDS)
def test_numbering_crosses_probe_batches(kind: str, tmp_path: Path) -> None:
    folder = LogFolder(kind, tmp_path)
    log = folder.open()
    assert log.append_many([(1, _record(i)) for i in range(600)])[-1] == 599
    assert log.append_many([(2, _record(i)) for i in range(256)])[-1] == 255  # a full batch
    folder.close()
    log = folder.open()
    assert (log.count(1), log.count(2)) == (600, 256)
    assert [r.request_id for r in log.load_step(1)] == [f"req-{i}" for i in range(600)]
    folder.close()


def test_a_hole_left_by_a_crash_is_never_overwritten(tmp_path: Path) -> None:
    # Qdrant only: a batch of the SQLite log is one transaction, stored whole or not at all.
    client = QdrantClient(path=str(tmp_path))
    log = QdrantRolloutLog(client, "t")
    log.append_many([(1, _record(i)) for i in range(4)])
    client.delete("t_rollouts", points_selector=[_rollout_id(1, 1)])  # as if never stored
    reopened = QdrantRolloutLog(client, "t")
    assert reopened.count(1) == 4
    assert reopened.append(1, _record(4)) == 4
    assert [r.request_id for r in reopened.load_step(1)] == ["req-0", "req-2", "req-3", "req-4"]
    client.close()


def test_after_a_hole_each_record_keeps_the_number_append_gave_it(tmp_path: Path) -> None:
    # The numbers are the ids: load_step does not renumber by position (append returns 4
    # and the record reads back as 4, not 3).
    client = QdrantClient(path=str(tmp_path))
    log = QdrantRolloutLog(client, "t")
    log.append_many([(1, _record(i)) for i in range(4)])
    client.delete("t_rollouts", points_selector=[_rollout_id(1, 1)])  # as if never stored
    reopened = QdrantRolloutLog(client, "t")
    assert reopened.append(1, _record(4)) == 4
    loaded = reopened.load_step(1)
    assert [(r.seq, r.request_id) for r in loaded] == [
        (0, "req-0"),
        (2, "req-2"),
        (3, "req-3"),
        (4, "req-4"),
    ]
    assert reopened.count(1) == 5  # every number used, the hole's too: the largest is below
    archived = reopened.archive_step(1, tmp_path / "archive").read_text(encoding="utf-8")
    assert [json.loads(line)["seq"] for line in archived.splitlines()] == [0, 2, 3, 4]
    client.close()


def test_replicas_numbers_follow_each_other_and_a_hole_keeps_its_number(
    tmp_path: Path,
) -> None:
    # Several writers: each one's numbers after those of the writers sorted before it, so
    # a step's numbers stay unique; a hole in the first keeps its number.
    client = QdrantClient(path=str(tmp_path))
    first, second = QdrantRolloutLog(client, "t", "r1"), QdrantRolloutLog(client, "t", "r2")
    assert first.append_many([(1, _record(i)) for i in range(3)]) == [0, 1, 2]
    assert second.append_many([(1, _record(i)) for i in (10, 11)]) == [0, 1]
    client.delete("t_rollouts", points_selector=[_rollout_id(1, 1, "r1")])
    for log in (first, second, QdrantRolloutLog(client, "t", "r3")):
        assert [(r.seq, r.request_id) for r in log.load_step(1)] == [
            (0, "req-0"),
            (2, "req-2"),
            (3, "req-10"),
            (4, "req-11"),
        ]
        assert log.count(1) == 5
    client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_drop_and_archive_a_step(kind: str, tmp_path: Path) -> None:
    folder = LogFolder(kind, tmp_path / "store")
    log = folder.open()
    log.append_many([(3, _record(i)) for i in range(3)] + [(4, _record(9))])
    path = log.archive_step(3, tmp_path / "archive")
    assert path == tmp_path / "archive" / "step-000003.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{**_json(i), "seq": i} for i in range(3)]
    assert sorted(p.name for p in path.parent.iterdir()) == ["step-000003.jsonl"]  # no tmp
    assert log.drop_step(3) == 3
    assert (log.count(3), log.load_step(3), log.count(4)) == (0, [], 1)
    assert log.append(3, _record(5)) == 0  # the id is written afresh
    assert _stored(log.load_step(3)) == [{**_json(5), "seq": 0}]
    assert _stored(log.load_step(4)) == [{**_json(9), "seq": 0}]
    folder.close()
    log = folder.open()  # the drop is stored, not only in memory
    assert (log.count(3), log.count(4)) == (1, 1)
    folder.close()


def test_a_dropped_step_leaves_the_memory(tmp_path: Path) -> None:
    # Embedded Qdrant keeps a deleted point's payload in RAM until the folder is reopened
    # (gigabytes over a long run's retention drops): the log releases it.
    client = QdrantClient(path=str(tmp_path / "q"))
    log = QdrantRolloutLog(client, "t")
    log.append_many([(0, _record(0))])  # the collection's own structures, before tracing
    big = [
        (
            1,
            RolloutRecord.model_validate(
                {**_json(i), "rollout": {"id": f"r{i}", "output": f"{i} " + "x" * 100_000}}
            ),
        )
        for i in range(60)
    ]
    gc.collect()
    tracemalloc.start()
    try:
        log.append_many(big)
        stored = tracemalloc.get_traced_memory()[0]
        del big
        assert log.drop_step(1) == 60
        gc.collect()
        left = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert stored > 6_000_000  # the 6 MB of outputs were held
    assert left < 1_000_000, f"{left} bytes still held after the drop"
    assert _stored(log.load_step(0)) == [{**_json(0), "seq": 0}]
    client.close()


def test_step_registry_transitions_persist(tmp_path: Path) -> None:
    client = QdrantClient(path=str(tmp_path))
    steps = StepRegistry(client, "t")
    assert steps.get(0) is None
    opened = steps.set(0, rollout_count=512, mode="async")
    assert opened.model_dump(mode="json") == {
        "step": 0,
        "status": "open",
        "rollout_count": 512,
        "flow_run_id": None,
        "rubric_versions": {},
        "error": None,
        "updated_at": opened.updated_at,
        "mode": "async",
    }
    steps.set(0, status="completing", flow_run_id="run-1")
    steps.set(1, status="failed", error="updater timed out")
    done = steps.set(0, status="done", rubric_versions={"global": 3}, duration_s=1.5)
    assert done.updated_at >= opened.updated_at
    with pytest.raises(ValidationError):
        steps.set(0, status="finished")
    with pytest.raises(ValidationError):
        steps.set(0, rollout_count=-1)
    client.close()

    client = QdrantClient(path=str(tmp_path))
    steps = StepRegistry(client, "t")
    assert steps.get(0) == done
    # Stored as its JSON: the fields a step has not set (attempt, executor, scopes) absent.
    assert done.model_dump(mode="json") == {
        "step": 0,
        "status": "done",
        "rollout_count": 512,
        "flow_run_id": "run-1",
        "rubric_versions": {"global": 3},
        "error": None,
        "updated_at": done.updated_at,
        "mode": "async",
        "duration_s": 1.5,
    }
    steps.set(2)
    listed = [(r.step, r.status) for r in steps.list()]
    assert listed == [(0, "done"), (1, "failed"), (2, "open")]
    assert [r.step for r in steps.list({"open", "failed"})] == [1, 2]
    assert [r.step for r in steps.list(None, 2)] == [1, 2]
    assert steps.list(limit=0) == []
    client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_archive_is_on_disk_before_it_takes_the_final_name(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crash right after the rename must not leave a short file under the final name:
    # every line is written and fsynced while the file still has its temporary name.
    synced: list[tuple[str, int]] = []
    fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        # the file, then its folder (the rename survives a power loss)
        synced.append((path.name, len(path.read_bytes().splitlines()) if path.is_file() else -1))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    folder = LogFolder(kind, tmp_path / "store")
    log = folder.open()
    log.append_many([(5, _record(i)) for i in range(300)])
    synced.clear()  # only the archive's own syncs
    path = log.archive_step(5, tmp_path / "archive")
    folder.close()
    assert synced == [(".step-000005.jsonl.tmp", 300), ("archive", -1)]
    assert len(path.read_bytes().splitlines()) == 300


def test_local_mode_is_read_from_the_public_init_options(tmp_path: Path) -> None:
    folder = QdrantClient(path=str(tmp_path))
    memory = QdrantClient(location=":memory:")
    server = QdrantClient(url="http://127.0.0.1:1", check_compatibility=False)  # not contacted
    assert (is_local(folder), is_local(memory), is_local(server)) == (True, True, False)
    folder.close()
    memory.close()
    server.close()


def test_delete_points_in_local_mode_ignores_absent_ids_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    client = QdrantClient(path=str(tmp_path))
    ensure_collection(client, "d", None)
    client.upsert(
        "d", points=[models.PointStruct(id=i, vector={}, payload={"n": i}) for i in (1, 2, 3)]
    )
    delete_points(client, "d", [1, 3, 99])
    assert [(p.id, p.payload) for p in client.retrieve("d", [1, 2, 3])] == [(2, {"n": 2})]
    client.close()
    reopened = QdrantClient(path=str(tmp_path))  # the deletion is stored, not only in RAM
    assert [p.id for p in reopened.retrieve("d", [1, 2, 3])] == [2]
    reopened.close()
