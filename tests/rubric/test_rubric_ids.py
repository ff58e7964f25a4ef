"""Adaptive ids are never reused within a scope (amaris/rubric/store.py): a retired id never
comes back with another meaning, in the rubric or in the ``rewards`` keyed by it. Over real
Qdrant in memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.settings import load_settings

ANCHOR = Criterion(id="A1", text="The answer is correct.", weight=1.0, is_anchor=True)
HEDGE = Criterion(id="R1", text="The response hedges.", weight=-1.0, is_anchor=False)
STEPS = Criterion(id="R2", text="Shows each step.", weight=0.5, is_anchor=False)
SHORT = Criterion(id="R1", text="Is short.", weight=0.5, is_anchor=False)
"""Another meaning under HEDGE's id."""


@pytest.fixture
def qdrant() -> Iterator[QdrantClient]:
    client = QdrantClient(":memory:")
    yield client
    client.close()


@pytest.fixture
def store(qdrant: QdrantClient) -> RubricStore:
    return RubricStore(qdrant, "t", None)


def publish(store: RubricStore, *adaptive: Criterion, **kw: Any) -> RubricVersion:
    args: dict[str, Any] = {"origin": "updater", "step": 1, "next_adaptive_id": 1, **kw}
    return store.publish(anchors=[ANCHOR], adaptive=list(adaptive), **args)


def test_a_retired_id_is_replaced_by_a_fresh_one_a_kept_one_stays(
    store: RubricStore, caplog: pytest.LogCaptureFixture
) -> None:
    publish(store, HEDGE, STEPS, next_adaptive_id=3)
    publish(store, STEPS, next_adaptive_id=3)
    with caplog.at_level("WARNING", logger="amaris.rubric"):
        fixed = publish(store, STEPS, SHORT, next_adaptive_id=3)  # SHORT came as R1
    assert [(c.id, c.text) for c in fixed.adaptive] == [("R2", STEPS.text), ("R3", SHORT.text)]
    assert fixed.next_adaptive_id == 4
    assert "adaptive R1 was held by an earlier version; published as R3" in caplog.text
    publish(store, SHORT.model_copy(update={"id": "R2"}), scope="b")
    publish(store, scope="b")  # R2, the highest id b held, retired
    other = publish(store, SHORT.model_copy(update={"id": "R2", "text": "Other."}), scope="b")
    assert [c.id for c in other.adaptive] == ["R3"]
    # A kept criterion keeps its id, its wording edited; a new one takes an id never held.
    edited = STEPS.model_copy(update={"text": "Shows each of its steps."})
    added = SHORT.model_copy(update={"id": "R4"})
    assert publish(store, edited, added).adaptive == (edited, added)


def test_the_next_id_is_past_every_id_the_scope_held(store: RubricStore) -> None:
    publish(store, HEDGE, STEPS, next_adaptive_id=3)
    # Every criterion retired, and a caller's next id too low: the version's is still past R2.
    assert publish(store, next_adaptive_id=1).next_adaptive_id == 3
    # Per scope: another scope has held nothing.
    assert publish(store, SHORT, scope="b").next_adaptive_id == 2


def test_the_guarantee_holds_after_a_restart_and_over_an_older_pointer(
    qdrant: QdrantClient, store: RubricStore
) -> None:
    publish(store, HEDGE, STEPS, next_adaptive_id=3)
    publish(store, STEPS, next_adaptive_id=3)
    # restore() writes the pointer as older stores did: the ids held are read from history.
    store.restore(store.history(), {"global": 2})
    reopened = RubricStore(qdrant, "t", None)
    assert [c.id for c in publish(reopened, STEPS, SHORT).adaptive] == ["R2", "R3"]
    assert publish(reopened, STEPS).next_adaptive_id == 4


def settings(*adaptive: Criterion) -> Any:
    return load_settings(
        None,
        anchor_rubrics=[{"text": ANCHOR.text, "weight": ANCHOR.weight}],
        adaptive_rubrics=[{"text": c.text, "weight": c.weight} for c in adaptive],
    )


def test_a_reset_keeps_the_ids_of_criteria_in_force_and_renumbers_the_others(
    store: RubricStore,
) -> None:
    first = store.reset_from_config(settings(HEDGE, STEPS))
    assert [c.id for c in first.adaptive] == ["R1", "R2"]  # an empty store: as configured
    # A criterion in force keeps its id, wherever the configuration lists it; the
    # configuration's second criterion is new: not R2, which meant STEPS.
    again = store.reset_from_config(settings(SHORT, HEDGE))
    assert [(c.id, c.text) for c in again.adaptive] == [("R3", SHORT.text), ("R1", HEDGE.text)]
    assert again.next_adaptive_id == 4
    # Retired, R1's criterion comes back under a new id.
    publish(store, SHORT.model_copy(update={"id": "R3"}), next_adaptive_id=4)
    back = store.reset_from_config(settings(HEDGE))
    assert [(c.id, c.text) for c in back.adaptive] == [("R4", HEDGE.text)]
