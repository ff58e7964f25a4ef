"""Batch scoring shared by /batch_score and /get_reward (amaris.scoring.batch): an item's
problems name their field as a path inside the item, which each route renders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from amaris.app.wiring import create_app
from amaris.models import ScoreRequest
from amaris.scoring.batch import BatchScoring, InvalidItem, ItemProblem, render_path
from amaris.scoring.refusals import OversizeError
from api.deps import batch_scoring
from api.errors import field_name
from tests.support.settings import make_settings
from tests.support.testclient import TestClient


@pytest.fixture
def batch(tmp_path: Path) -> Iterator[BatchScoring]:
    settings = make_settings(tmp_path, server={"max_batch_items": 3})
    with TestClient(create_app(settings, qdrant_location=":memory:")) as client:
        yield batch_scoring(client.app.state.services)


def rollout(**fields: object) -> dict[str, object]:
    return {"id": "r", "input": "What is 2+2?", "output": "4", **fields}


def test_paths_render_as_the_routes_name_fields() -> None:
    assert render_path(("rollout", "output"), "items[3]") == "items[3].rollout.output"
    assert render_path(("rollout", "metadata", 0), "items[0]") == "items[0].rollout.metadata[0]"
    assert render_path((), "items[2]") == "items[2]"
    assert render_path((0, "x")) == "[0].x"
    # The API's validation errors render the same way (the body's own name left out).
    assert field_name(("body", "items", 1, "rollout")) == "items[1].rollout"
    assert field_name(("body",)) == "body"
    assert field_name(("x" * 150,)) == "x" * 100


def test_a_valid_item_is_a_request(batch: BatchScoring) -> None:
    checked = batch.check(0, {"rollout": rollout(), "metadata": {"current_step": 1}}, True)
    assert isinstance(checked, ScoreRequest)
    assert checked.include_breakdown and checked.rollout.id == "r"


def test_an_item_that_is_not_an_object_is_invalid_as_a_whole(batch: BatchScoring) -> None:
    checked = batch.check(2, ["not", "an", "object"], False)
    assert checked == InvalidItem(
        2, None, (ItemProblem((), "must be an object {rollout, metadata}"),)
    )
    assert checked.reason() == "items[2]: must be an object {rollout, metadata}"


def test_validation_errors_keep_pydantic_locations(batch: BatchScoring) -> None:
    raw = {"rollout": rollout(output=["4"], group_id=7), "metadata": {"current_step": -1}}
    checked = batch.check(1, raw, False)
    assert isinstance(checked, InvalidItem)
    assert checked.rollout_id == "r"
    paths = [p.path for p in checked.problems]
    assert paths == [("rollout", "output"), ("rollout", "group_id"), ("metadata", "current_step")]
    assert checked.path == ("rollout", "output")
    assert checked.reason().startswith("items[1].rollout.output: ")
    assert "; items[1].metadata.current_step: " in checked.reason()


def test_an_invalid_id_is_still_shown_when_it_can_be(batch: BatchScoring) -> None:
    checked = batch.check(4, {"rollout": rollout(id=12), "metadata": {"current_step": 1}}, False)
    assert isinstance(checked, InvalidItem)
    assert checked.rollout_id == "12"
    assert checked.reason() == "items[4].rollout.id: Input should be a valid string"


def test_an_oversized_field_is_named_by_its_path(batch: BatchScoring) -> None:
    limit = 100_000
    raw = {
        "rollout": rollout(),
        "metadata": {"current_step": 1, "run.notes": "n" * (limit + 1)},
    }
    checked = batch.check(0, raw, False)
    assert isinstance(checked, InvalidItem)
    # A metadata key holding a dot stays one key of the path.
    assert checked.path == ("metadata", "run.notes")
    assert checked.rollout_id == "r"
    assert checked.reason() == (
        f"items[0].metadata.run.notes: metadata.run.notes has {limit + 1} characters; "
        f"the limit is {limit}"
    )


def test_a_batch_over_its_bound_is_refused_naming_its_field(batch: BatchScoring) -> None:
    batch.admit("query", 3)
    with pytest.raises(OversizeError) as refused:
        batch.admit("query", 4)
    assert refused.value.path == ("query",)
    assert str(refused.value) == "query has 4 items; the limit is 3"
