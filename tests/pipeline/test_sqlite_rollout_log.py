"""The embedded store's rollout log (SQLite): one commit per batch, which backend the
configuration picks, and the upgrade of a data folder whose rollouts are in Qdrant."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from amaris.app.wiring import create_app
from amaris.memory.qdrant import open_qdrant
from amaris.memory.qdrant_rollout_log import QdrantRolloutLog
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_backend import open_rollout_log, sqlite_path
from amaris.memory.rollout_log import StepRegistry
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog
from tests.support.pipeline_helpers import metadata, rollout
from tests.support.settings import make_settings
from tests.support.testclient import TestClient


def wal_commits(database: Path) -> int:
    """Commit frames in ``database``'s write-ahead log (those of its current generation)."""
    wal = database.with_name(database.name + "-wal").read_bytes()
    page_size = struct.unpack(">I", wal[8:12])[0]
    salts = wal[16:24]
    commits, offset = 0, 32
    while offset + 24 + page_size <= len(wal):
        header = wal[offset : offset + 24]
        if header[8:16] != salts:
            break  # a frame of an earlier generation: the log ends here
        commits += struct.unpack(">I", header[4:8])[0] != 0  # database size: commit frames
        offset += 24 + page_size
    return commits


def _record(i: int) -> RolloutRecord:
    return RolloutRecord.model_validate(
        {
            "request_id": f"req-{i}",
            "rollout": {"id": f"r{i}", "output": f"answer {i} " + "x" * 1500},
        }
    )


def test_a_batch_is_one_commit_to_a_write_ahead_log(tmp_path: Path) -> None:
    database = tmp_path / "log.sqlite3"
    log = SqliteRolloutLog(database, "t")
    log.append(0, _record(0))
    before = wal_commits(database)
    batch = [(step, _record(i)) for i in range(60) for step in (1, 2, 3)]
    assert log.append_many(batch)[-3:] == [59, 59, 59]
    assert wal_commits(database) == before + 1
    log.close()
    with sqlite3.connect(database) as reader:
        assert reader.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        (count,) = reader.execute('SELECT COUNT(*) FROM "t_rollouts"').fetchone()
    assert count == 181


def test_a_failed_batch_stores_none_of_its_records(tmp_path: Path) -> None:
    database = tmp_path / "log.sqlite3"
    log = SqliteRolloutLog(database, "t")
    log.append_many([(7, _record(i)) for i in range(3)])
    assert log.count(7) == 3
    # A second writer (never two in amaris: the Qdrant folder's lock keeps one process)
    # takes sequence numbers this log believes free, so its next batch conflicts.
    other = SqliteRolloutLog(database, "t")
    other.append_many([(7, _record(3)), (7, _record(4))])
    with pytest.raises(sqlite3.IntegrityError):
        log.append_many([(8, _record(100)), (7, _record(5))])
    assert log.load_step(8) == []  # the record before the conflict is not stored either
    assert log.append(7, _record(5)) == 5  # the numbering is read afresh
    assert [r.request_id for r in other.load_step(7)] == [f"req-{i}" for i in range(6)]
    other.close()
    log.close()


def test_the_configuration_picks_the_backend(tmp_path: Path) -> None:
    embedded = make_settings(tmp_path)
    client = open_qdrant(embedded.memory)
    log = open_rollout_log(embedded, client)
    assert isinstance(log, SqliteRolloutLog)
    assert log.synchronous == "full"  # a rollout that got its reward survives a power loss
    assert log.append(0, _record(0)) == 0
    assert sqlite_path(embedded) == tmp_path / "data" / "rollout_log.sqlite3"
    assert sqlite_path(embedded).is_file()
    assert not client.collection_exists("amaris_rollouts")
    log.close()
    relaxed = make_settings(tmp_path, **{"memory.rollout_log_synchronous": "normal"})
    log = open_rollout_log(relaxed, client)
    assert isinstance(log, SqliteRolloutLog)
    assert (log.synchronous, log.count(0)) == ("normal", 1)
    log.close()
    # several replicas of one store: the shared Qdrant collection, with writer sequences
    shared = make_settings(tmp_path, **{"pipeline.executor": "deployment"})
    replica = open_rollout_log(shared, client, writer="r1")
    assert isinstance(replica, QdrantRolloutLog)
    assert replica.append(0, _record(1)) == 0
    assert client.collection_exists("amaris_step_writers")
    client.close()
    # an in-memory store keeps its rollout log in memory too
    memory = QdrantClient(":memory:")
    elsewhere = make_settings(tmp_path / "elsewhere")
    in_memory = open_rollout_log(elsewhere, memory)
    assert isinstance(in_memory, SqliteRolloutLog)
    assert in_memory.append(0, _record(2)) == 0
    assert not (tmp_path / "elsewhere").exists()
    in_memory.close()
    memory.close()


def _old_folder(tmp_path: Path, steps: dict[int, list[RolloutRecord]]) -> None:
    """A data folder as the previous version left it: the rollouts in Qdrant."""
    client = open_qdrant(make_settings(tmp_path).memory)
    QdrantRolloutLog(client, "amaris").append_many(
        [(step, record) for step, records in steps.items() for record in records]
    )
    client.close()


def test_an_upgraded_folder_moves_its_rollouts_once(tmp_path: Path) -> None:
    steps = {3: [_record(i) for i in range(5)], 4: [_record(10), _record(11)]}
    _old_folder(tmp_path, steps)
    settings = make_settings(tmp_path)
    client = open_qdrant(settings.memory)
    log = open_rollout_log(settings, client)
    assert isinstance(log, SqliteRolloutLog)
    for step, records in steps.items():
        assert [r.to_json() for r in log.load_step(step)] == [
            {**r.to_json(), "seq": i} for i, r in enumerate(records)
        ]
    assert not client.collection_exists("amaris_rollouts")  # moved, not copied
    log.close()

    # A crash between the import's commit and the collection's deletion: the next open
    # imports again, and nothing is there twice.
    QdrantRolloutLog(client, "amaris").append_many([(3, r) for r in steps[3]])
    log = open_rollout_log(settings, client)
    assert (log.count(3), log.count(4)) == (5, 2)
    assert log.append(3, _record(5)) == 5
    assert [r.request_id for r in log.load_step(3)] == [f"req-{i}" for i in range(6)]
    assert not client.collection_exists("amaris_rollouts")
    log.close()
    client.close()


@pytest.mark.usefixtures("prefect_harness")
def test_a_step_left_open_by_the_previous_version_completes_after_the_upgrade(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    behaviours = ["correct", "wrong", "hacking", "correct", "wrong"]
    with TestClient(create_app(settings)) as client:
        for i, behaviour in enumerate(behaviours):
            body = {"rollout": rollout(3, i, behaviour), "metadata": metadata(3)}
            assert client.post("/score", json=body).json()["status"] == "scored"
        services = client.app.state.services  # type: ignore[attr-defined]
        records = services.rollouts.load_step(3)
    # Put the folder back as the previous version kept it: the records (as /score logged
    # them) in the Qdrant collection, no SQLite log; step 3 is open in the registry.
    for path in sqlite_path(settings).parent.glob(f"{sqlite_path(settings).name}*"):
        path.unlink()
    _old_folder(
        tmp_path, {3: [RolloutRecord.model_validate(r.to_json(seq=False)) for r in records]}
    )
    qdrant = open_qdrant(settings.memory)
    registered = StepRegistry(qdrant, "amaris").get(3)
    assert registered is not None and registered.status == "open"
    qdrant.close()

    with TestClient(create_app(settings)) as client:
        steps = client.get("/steps").json()
        assert [(s["step"], s["status"]) for s in steps] == [(3, "open")]
        assert client.post("/complete", json={"step": 3}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 3, "timeout": 120}).json()
        assert done["status"] == "updated", done
        assert done["scopes"]["global"]["rollouts"] == 5
        logged = client.get("/steps/3/rollouts").json()["records"]
    assert [r["rollout"]["id"] for r in logged] == [r.rollout.id for r in records]
