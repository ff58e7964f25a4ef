"""State survives damage loudly.

- A rubric store that lost versions is restored from ``rubrics.json`` or refused at
  start-up, never restarted silently at version 1 with steps still marked done. The app's
  own start-up (``create_app`` in a ``TestClient``) over embedded Qdrant in a folder,
  damaged (the collection folder deleted, its ``storage.sqlite``
  truncated) between two starts.
- A locked database (another process holding SQLite's write lock on the real file: the
  rollout log, the step registry's Qdrant collection) gives ``/score`` and ``/complete`` a
  503 with the cause, ``/healthz`` says ``degraded`` with it, nothing changes, and the same
  request succeeds once the lock is gone. (A full disk, ``ENOSPC``, is injected at the
  same seams in tests/memory/test_storage_failures_unit.py.)
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from amaris.app.wiring import create_app
from amaris.cli.main import main as cli_main
from amaris.memory.rollout_backend import sqlite_path
from amaris.rubric.integrity import RubricStoreDamagedError
from amaris.rubric.model import Criterion
from amaris.services import Services
from amaris.settings import Settings
from tests.support.pipeline_helpers import metadata, rollout
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

EXTRA = Criterion(id="R1", text="The response shows its steps.", weight=0.5, is_anchor=False)


def run_two_steps(settings: Settings) -> list[int]:
    """First life: steps 0 and 1 done, each publishing a version (2 and 3)."""
    with TestClient(create_app(settings)) as client:
        services: Services = client.app.state.services  # type: ignore[attr-defined]
        published = []
        for step in (0, 1):
            base = services.store.current()
            version = services.store.publish(
                anchors=base.anchors,
                adaptive=[*base.adaptive, EXTRA.model_copy(update={"id": f"R{step + 1}"})],
                origin="updater",
                step=step,
                next_adaptive_id=step + 2,
            )
            services.steps.set(step, status="done", rubric_versions={"global": version.version})
            published.append(version.version)
        assert client.get("/healthz").json()["rubric_version"] == 3
    return published


def damage(settings: Settings, how: str) -> None:
    folder = Path(settings.memory.path) / "qdrant" / "collection" / "amaris_rubrics"
    assert folder.is_dir()
    if how == "deleted":
        shutil.rmtree(folder)
    else:
        (folder / "storage.sqlite").write_bytes(b"")


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_store_that_lost_its_versions_is_restored_from_rubrics_json(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(tmp_path)
    assert run_two_steps(settings) == [2, 3]
    record = json.loads(settings.memory.rubrics_export_path.read_text())
    damage(settings, how)

    with TestClient(create_app(settings)) as client:
        health = client.get("/healthz").json()
        history = client.get("/rubrics/history").json()
        services: Services = client.app.state.services  # type: ignore[attr-defined]
        steps = {s: services.steps.get(s) for s in (0, 1)}
    # The version in force and every version come back as they were, not version 1.
    assert health["rubric_version"] == 3
    assert [v["version"] for v in history] == [1, 2, 3]
    assert [c["id"] for c in history[2]["adaptive"]] == ["R1", "R2"]
    assert {s: r.status if r else None for s, r in steps.items()} == {0: "done", 1: "done"}
    # The record was not overwritten by a fresh version 1.
    assert json.loads(settings.memory.rubrics_export_path.read_text()) == record
    restored = [r.getMessage() for r in caplog.records if r.name == "amaris.rubric"]
    assert any("'global' v1, 'global' v2, 'global' v3" in m for m in restored), restored


def test_a_store_that_lost_versions_rubrics_json_lacks_refuses_to_start(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    run_two_steps(settings)
    damage(settings, "deleted")
    settings.memory.rubrics_export_path.unlink()

    app = create_app(settings)
    with pytest.raises(RubricStoreDamagedError) as refused, TestClient(app):
        pass
    message = str(refused.value)
    assert "'global' v2 (referred to by step 0)" in message
    assert "'global' v3 (referred to by step 1)" in message
    assert "steps 0, 1 are marked done" in message
    assert "rubrics.json does not exist" in message
    # Nothing was written: a second start refuses the same way (no version 1 appeared).
    with pytest.raises(RubricStoreDamagedError), TestClient(create_app(settings)):
        pass
    assert not settings.memory.rubrics_export_path.exists()


def test_a_store_reset_by_an_earlier_start_is_refused(tmp_path: Path) -> None:
    """What an amaris without the check left: version 1 re-created from the configuration
    and rubrics.json overwritten with it, while steps 0-1 still name versions 2 and 3."""
    settings = make_settings(tmp_path)
    run_two_steps(settings)
    damage(settings, "deleted")
    settings.memory.rubrics_export_path.write_text(
        json.dumps({"current": {}, "versions": []}), encoding="utf-8"
    )
    refused = pytest.raises(RubricStoreDamagedError, match=r"'global' v2 \(referred to by step 0\)")
    with refused, TestClient(create_app(settings)):
        pass


def test_an_intact_store_with_a_lagging_record_starts_as_it_is(tmp_path: Path) -> None:
    """rubrics.json may lag the store (a step exports once at its end): not damage."""
    settings = make_settings(tmp_path)
    run_two_steps(settings)
    record = json.loads(settings.memory.rubrics_export_path.read_text())
    record["versions"] = record["versions"][:1]
    record["current"] = {"global": 1}
    settings.memory.rubrics_export_path.write_text(json.dumps(record), encoding="utf-8")
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").json()["rubric_version"] == 3


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Another connection's write lock on the SQLite database at ``path``: every write of
    amaris's own connection waits SQLite's busy timeout, then fails "database is locked"."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


def score_body(step: int, index: int) -> dict[str, Any]:
    return {"rollout": rollout(step, index, "correct"), "metadata": metadata(step)}


def test_a_locked_rollout_log_gives_score_a_503_with_its_cause_and_healthz_degraded(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        assert client.post("/score", json=score_body(0, 0)).status_code == 200
        assert client.get("/healthz").json()["status"] == "ok"
        with locked(sqlite_path(settings)):
            refused = client.post("/score", json=score_body(0, 1))
            health = client.get("/healthz").json()
            steps_view = client.get("/steps/0/rollouts").json()
        again = client.post("/score", json=score_body(0, 1))
        healed = client.get("/healthz").json()
        stored = client.get("/steps/0/rollouts").json()

    assert refused.status_code == 503
    assert refused.headers["Retry-After"]
    body = refused.json()
    assert body["error"] == "storage_unavailable"
    assert body["detail"][0]["field"] == "storage"
    assert "rollout log: database is locked" in body["detail"][0]["message"]
    assert health["status"] == "degraded"
    assert "database is locked" in health["degraded_causes"]["rollout log"]
    assert [r["rollout"]["id"] for r in steps_view["records"]] == ["s0-r0-correct"]
    # The same rollout again, once the lock is gone: scored, logged once, healthy.
    assert again.status_code == 200
    assert again.json()["status"] == "scored"
    assert (healed["status"], healed["degraded_causes"]) == ("ok", {})
    assert [r["rollout"]["id"] for r in stored["records"]] == ["s0-r0-correct", "s0-r1-correct"]


@pytest.mark.usefixtures("prefect_harness")
def test_a_locked_step_registry_leaves_the_step_open_and_complete_retryable(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    registry = Path(settings.memory.path) / "qdrant" / "collection" / "amaris_steps"
    with TestClient(create_app(settings)) as client:
        for index in range(3):
            assert client.post("/score", json=score_body(0, index)).status_code == 200
        with locked(registry / "storage.sqlite"):
            refused = client.post("/complete", json={"step": 0})
            health = client.get("/healthz").json()
        listed = client.get("/steps").json()
        retried = client.post("/complete", json={"step": 0})
        done = client.get("/rubric_status/wait", params={"step": 0, "timeout": 120}).json()
        healed = client.get("/healthz").json()

    assert refused.status_code == 503
    assert refused.json()["error"] == "storage_unavailable"
    assert "step registry: database is locked" in refused.json()["detail"][0]["message"]
    assert health["status"] == "degraded"
    assert set(health["degraded_causes"]) == {"step registry"}
    # Not left ``completing`` with no run until a restart: still open, and /complete works.
    assert listed == [{"step": 0, "status": "open", "rubric": None}]
    assert retried.json() == {"status": "complete"}
    assert done["status"] == "unchanged"
    assert healed["status"] == "ok"


def test_rubrics_init_on_a_damaged_store_refuses_and_keeps_the_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`amaris rubrics init` would publish version 1 and export it over rubrics.json: on a
    store that lost versions rubrics.json lacks it refuses like the start-up."""
    settings = make_settings(tmp_path)
    run_two_steps(settings)
    damage(settings, "deleted")
    settings.memory.rubrics_export_path.unlink()
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {"memory": {"path": settings.memory.path.as_posix(), "embedding_model": "hashing"}}
        ),
        encoding="utf-8",
    )
    assert cli_main(["rubrics", "init", "--config", str(config)]) == 2
    assert "'global' v3 (referred to by step 1)" in capsys.readouterr().err
    assert not settings.memory.rubrics_export_path.exists()
