"""The rubric store (:class:`RubricStore`) through its public methods, over real Qdrant in
memory: version numbers and parents, the version in force per scope, what another store on
the same Qdrant published, history, the ``rubrics.json`` export, and the start-up check of
the configured anchors. Needs no fixture of tests/conftest.py (mutation testing runs it with
``--noconftest``: bench/evaluations/mutation.py ``rubric_store``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.rubric.model import Criterion
from amaris.rubric.store import RubricStore, RubricStoreError
from amaris.settings import Settings, load_settings

ANCHOR = Criterion(id="A1", text="The answer is correct.", weight=1.0, is_anchor=True)
HEDGE = Criterion(id="R1", text="The response hedges.", weight=-1.0, is_anchor=False)
STEPS = Criterion(id="R2", text="Shows each step.", weight=0.5, is_anchor=False)


def settings(**overrides: Any) -> Settings:
    return load_settings(
        None,
        **{
            "anchor_rubrics": [{"text": ANCHOR.text, "weight": 1.0}],
            "adaptive_rubrics": [{"text": HEDGE.text, "weight": -1.0}],
            **overrides,
        },
    )


@pytest.fixture
def qdrant() -> Iterator[QdrantClient]:
    client = QdrantClient(":memory:")
    yield client
    client.close()


def publish(store: RubricStore, *adaptive: Criterion, **kw: Any) -> Any:
    args: dict[str, Any] = {"origin": "updater", "step": 1, "next_adaptive_id": 3, **kw}
    return store.publish(anchors=[ANCHOR], adaptive=list(adaptive), **args)


def test_an_empty_store_has_no_rubric_and_no_version(qdrant: QdrantClient) -> None:
    store = RubricStore(qdrant, "t", None)
    assert not store.is_cached("global")
    with pytest.raises(RubricStoreError, match="no rubric for scope 'global'"):
        store.current()
    with pytest.raises(RubricStoreError, match=r"rubric version 1 does not exist \(scope 'a'\)"):
        store.get(1, "a")
    assert store.history() == []
    assert store.history(None) == []
    assert store.refresh() == []
    assert not store.is_cached("global")


def test_versions_are_numbered_per_scope_each_with_its_parent(qdrant: QdrantClient) -> None:
    store = RubricStore(qdrant, "t", None)
    first = publish(store, HEDGE, origin="config", step=None, next_adaptive_id=2)
    second = publish(store, HEDGE, STEPS, step=4)
    other = publish(store, STEPS, scope="b", step=5)
    assert [(v.version, v.parent, v.scope) for v in (first, second, other)] == [
        (1, None, "global"),
        (2, 1, "global"),
        (1, None, "b"),
    ]
    assert (second.origin, second.step, second.next_adaptive_id) == ("updater", 4, 3)
    assert second.anchors == (ANCHOR,)
    assert second.adaptive == (HEDGE, STEPS)
    assert store.is_cached("global") and store.is_cached("b")
    assert store.current() == second
    assert store.current("b") == other
    assert store.get(1) == first
    assert store.get(2, "global") == second
    assert store.get(1, "b") == other
    with pytest.raises(RubricStoreError, match="rubric version 2 does not exist"):
        store.get(2, "b")
    assert store.history() == [first, second]
    assert store.history("b") == [other]
    assert store.history(None) == [other, first, second]  # by scope, then version


def test_a_new_store_reads_the_version_in_force_from_qdrant(qdrant: QdrantClient) -> None:
    writer = RubricStore(qdrant, "t", None)
    publish(writer, HEDGE)
    latest = publish(writer, HEDGE, STEPS, scope="b")
    reader = RubricStore(qdrant, "t", None)
    assert not reader.is_cached("b")
    assert reader.current("b") == latest
    assert reader.is_cached("b")
    assert not reader.is_cached("global")
    # Publishing after a restart goes on from the stored numbers.
    assert publish(reader, HEDGE, scope="b").version == 2
    assert publish(reader, HEDGE).parent == 1
    assert RubricStore(qdrant, "other", None).history(None) == []  # its own collection


def test_refresh_loads_only_the_scopes_another_store_changed(qdrant: QdrantClient) -> None:
    mine = RubricStore(qdrant, "t", None)
    theirs = RubricStore(qdrant, "t", None)
    publish(mine, HEDGE)
    b1 = publish(mine, HEDGE, scope="b")
    c1 = publish(mine, HEDGE, scope="c")
    assert mine.refresh() == []
    assert theirs.current("c") == c1
    b2 = publish(theirs, HEDGE, STEPS, scope="b")
    g2 = publish(theirs, STEPS)
    assert (mine.current("b"), mine.current().version) == (b1, 1)  # until refreshed
    assert sorted(mine.refresh()) == ["b", "global"]
    assert mine.current("b") == b2
    assert mine.current() == g2
    assert mine.current("c") == c1
    assert mine.refresh() == []
    # A scope this store never read is not loaded by a refresh.
    publish(theirs, HEDGE, scope="d")
    assert mine.refresh() == []
    assert not mine.is_cached("d")


def test_the_export_holds_every_version_and_the_versions_in_force(
    qdrant: QdrantClient, tmp_path: Path
) -> None:
    path = tmp_path / "new" / "folder" / "rubrics.json"
    store = RubricStore(qdrant, "t", path)
    pitfall = Criterion(
        id="R3", text="Répond « peut-être ».", weight=-0.5, is_anchor=False, findings=("hedging",)
    )
    publish(store, HEDGE)
    publish(store, pitfall, scope="b")
    text = path.read_text(encoding="utf-8")
    assert "« peut-être »" in text  # readable as written, not \u escapes
    assert '\n  "current": {' in text  # indented for people
    document = json.loads(text)
    assert document["current"] == {"global": 1, "b": 1}
    assert [(v["scope"], v["version"]) for v in document["versions"]] == [
        ("b", 1),
        ("global", 1),
    ]
    assert document["versions"][0]["adaptive"][0]["text"] == pitfall.text
    # the findings a criterion rests on are kept with its version, for people too
    assert document["versions"][0]["adaptive"][0]["findings"] == ["hedging"]
    assert store.get(1, "b").adaptive == (pitfall,)
    assert list(path.parent.iterdir()) == [path]  # the temporary file took the final name

    unexported = publish(store, STEPS, export=False)
    assert json.loads(path.read_text(encoding="utf-8")) == document
    store.export()
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["current"] == {"global": unexported.version, "b": 1}
    assert len(document["versions"]) == 3


def test_no_export_path_writes_no_file(qdrant: QdrantClient, tmp_path: Path) -> None:
    store = RubricStore(qdrant, "t", None)
    publish(store, HEDGE)
    store.export()
    assert store.current().version == 1
    assert list(tmp_path.iterdir()) == []


def test_first_start_publishes_the_configuration_then_finds_it(qdrant: QdrantClient) -> None:
    store = RubricStore(qdrant, "t", None)
    configured = settings(
        adaptive_rubrics=[
            {"text": HEDGE.text, "weight": -1.0},
            {"text": STEPS.text, "weight": 0.5},
        ]
    )
    first = store.ensure_initialized(configured)
    assert (first.version, first.parent, first.origin, first.step) == (1, None, "config", None)
    assert first.anchors == (ANCHOR,)
    assert first.adaptive == (HEDGE, STEPS)
    assert first.next_adaptive_id == 3
    assert store.ensure_initialized(configured) == first
    # Another process over the same store finds it too.
    assert RubricStore(qdrant, "t", None).ensure_initialized(configured) == first
    assert store.history() == [first]


def test_a_later_version_with_the_same_anchors_is_kept_at_start_up(
    qdrant: QdrantClient,
) -> None:
    store = RubricStore(qdrant, "t", None)
    store.ensure_initialized(settings())
    evolved = publish(store, STEPS, step=3)
    assert store.ensure_initialized(settings()) == evolved
    # The adaptive criteria of the configuration only seed version 1.
    assert store.ensure_initialized(settings(adaptive_rubrics=[])) == evolved


@pytest.mark.parametrize(
    "anchors",
    [
        [{"text": "Something else.", "weight": 1.0}],
        [{"text": ANCHOR.text, "weight": 2.0}],
        [{"text": ANCHOR.text, "weight": 1.0, "rule": {"kind": "exact"}}],
        [{"text": ANCHOR.text, "weight": 1.0}, {"text": "Is short.", "weight": 1.0}],
    ],
    ids=["text", "weight", "rule", "one-more"],
)
def test_changed_anchors_stop_start_up_until_reset(
    qdrant: QdrantClient, anchors: list[dict[str, Any]]
) -> None:
    store = RubricStore(qdrant, "t", None)
    first = store.ensure_initialized(settings())
    changed = settings(anchor_rubrics=anchors, adaptive_rubrics=[])
    with pytest.raises(RubricStoreError, match="differ from the anchors of rubric version 1"):
        store.ensure_initialized(changed)
    assert store.current() == first
    reset = store.reset_from_config(changed)
    assert (reset.version, reset.parent, reset.origin, reset.adaptive) == (2, 1, "config", ())
    # R1 (version 1's pitfall) is retired by the reset: the next adaptive id is past it.
    assert reset.next_adaptive_id == 2
    assert store.ensure_initialized(changed) == reset


def test_reset_of_one_scope_leaves_the_others(qdrant: QdrantClient) -> None:
    store = RubricStore(qdrant, "t", None)
    base = store.ensure_initialized(settings())
    scoped = store.reset_from_config(settings(), scope="b")
    assert (scoped.version, scoped.scope, scoped.parent) == (1, "b", None)
    assert scoped.criteria == base.criteria
    assert store.current() == base


def test_refresh_past_version_256_reports_only_real_changes(qdrant: QdrantClient) -> None:
    # Numbers past CPython's small-int cache: equal versions are distinct objects.
    mine = RubricStore(qdrant, "t", None)
    theirs = RubricStore(qdrant, "t", None)
    for _ in range(257):
        publish(theirs, HEDGE, export=False)
    assert mine.current().version == 257
    assert mine.refresh() == []
    latest = publish(theirs, STEPS, export=False)
    assert mine.refresh() == ["global"]
    assert mine.current() == latest
    assert [v.version for v in mine.history()] == list(range(1, 259))  # more than one page
