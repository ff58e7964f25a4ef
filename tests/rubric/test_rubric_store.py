"""Rubric versions in real Qdrant local mode: immutable, durable, exported."""

import json
from pathlib import Path

import pytest

from amaris.memory.qdrant import StoreLockedError, open_qdrant
from amaris.rubric.model import Criterion
from amaris.rubric.store import RubricStore, RubricStoreError
from tests.support.settings import make_settings

ADAPTIVE = [{"text": "The response shows its reasoning.", "weight": 0.5}]


def test_first_start_creates_version_one_from_config(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, adaptive_rubrics=ADAPTIVE)
    client = open_qdrant(settings.memory)
    store = RubricStore(client, "amaris", settings.memory.rubrics_export_path)
    version = store.ensure_initialized(settings)
    assert (version.version, version.parent, version.origin, version.step) == (
        1,
        None,
        "config",
        None,
    )
    assert [(c.id, c.weight, c.is_anchor) for c in version.criteria] == [
        ("A1", 1.0, True),
        ("R1", 0.5, False),
    ]
    assert version.next_adaptive_id == 2
    # a second start finds the same version rather than creating another
    assert store.ensure_initialized(settings).version == 1
    client.close()


def test_versions_survive_a_restart_and_are_exported(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    client = open_qdrant(settings.memory)
    store = RubricStore(client, "amaris", settings.memory.rubrics_export_path)
    first = store.ensure_initialized(settings)
    added = Criterion(id="R1", text="Offers one answer only.", weight=0.5, is_anchor=False)
    second = store.publish(
        anchors=first.anchors, adaptive=[added], origin="updater", step=3, next_adaptive_id=2
    )
    assert (second.version, second.parent, second.step) == (2, 1, 3)
    client.close()

    client = open_qdrant(settings.memory)
    reopened = RubricStore(client, "amaris", settings.memory.rubrics_export_path)
    assert reopened.current().version == 2
    assert reopened.current().adaptive == (added,)
    assert reopened.get(1) == first  # the old version is unchanged
    assert [v.version for v in reopened.history()] == [1, 2]
    exported = json.loads(settings.memory.rubrics_export_path.read_text())
    assert exported["current"] == {"global": 2}
    assert [v["version"] for v in exported["versions"]] == [1, 2]
    assert exported["versions"][1]["adaptive"][0]["text"] == "Offers one answer only."
    client.close()


def test_changed_anchors_in_config_stop_start_up(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    client = open_qdrant(settings.memory)
    store = RubricStore(client, "amaris", None)
    store.ensure_initialized(settings)
    changed = make_settings(tmp_path, anchor_rubrics=[{"text": "Something else.", "weight": 1}])
    with pytest.raises(RubricStoreError, match="amaris rubrics init"):
        store.ensure_initialized(changed)
    reset = store.reset_from_config(changed)
    assert (reset.version, reset.parent, reset.origin) == (2, 1, "config")
    assert reset.anchors[0].text == "Something else."
    client.close()


def test_a_changed_anchor_weight_in_config_stops_start_up(tmp_path: Path) -> None:
    # Same text, another weight: still a different anchor, never silently ignored.
    settings = make_settings(tmp_path)
    client = open_qdrant(settings.memory)
    store = RubricStore(client, "amaris", None)
    first = store.ensure_initialized(settings)
    text = first.anchors[0].text
    reweighted = make_settings(tmp_path, anchor_rubrics=[{"text": text, "weight": 3}])
    with pytest.raises(RubricStoreError, match="differ from the anchors of rubric version 1"):
        store.ensure_initialized(reweighted)
    assert store.current() == first
    client.close()


def test_unknown_version_and_second_process_lock(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    client = open_qdrant(settings.memory)
    store = RubricStore(client, "amaris", None)
    store.ensure_initialized(settings)
    with pytest.raises(RubricStoreError, match="does not exist"):
        store.get(7)
    with pytest.raises(StoreLockedError):
        open_qdrant(settings.memory)
    client.close()


def test_criterion_versions_are_frozen() -> None:
    criterion = Criterion(id="A1", text="x", weight=1.0, is_anchor=True)
    with pytest.raises(ValueError):
        criterion.weight = 2.0  # type: ignore[misc]


def test_refresh_picks_up_a_version_published_by_another_process(tmp_path: Path) -> None:
    # Two stores over one Qdrant: what two replicas see through a Qdrant server.
    settings = make_settings(tmp_path)
    client = open_qdrant(settings.memory)
    replica_a = RubricStore(client, "amaris", None)
    replica_b = RubricStore(client, "amaris", None)
    first = replica_a.ensure_initialized(settings)
    assert replica_b.current().version == 1
    assert replica_a.refresh() == []
    added = Criterion(id="R1", text="Offers one answer only.", weight=-1.0, is_anchor=False)
    replica_b.publish(
        anchors=first.anchors, adaptive=[added], origin="updater", step=2, next_adaptive_id=2
    )
    assert replica_a.current().version == 1  # cached until refreshed
    assert replica_a.refresh() == ["global"]
    assert replica_a.current().version == 2
    assert replica_a.current().adaptive == (added,)
    client.close()
