"""Every rollout-taking route validates a request completely before any state changes.

Lone surrogates, nesting past ``MAX_JSON_DEPTH`` and free-text fields (metadata included)
over ``scoring.max_field_chars`` are refused on ``/score``, ``/batch_score`` (the item's
``invalid`` status) and ``/get_reward`` (the route the verl, TRL and OpenRLHF adapters
call), with the field named and nothing judged, stored or counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from amaris.services import Services
from amaris.settings import Settings
from amaris.text_fields import MAX_JSON_DEPTH
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

BAD = "\ud800"
"""A lone surrogate: ``"\\ud800"`` once JSON-encoded, which ``json.loads`` accepts."""
JSON = {"content-type": "application/json"}


@contextmanager
def serve(settings: Settings) -> Iterator[tuple[TestClient, Services]]:
    app = in_memory_app(settings)
    with TestClient(app) as client:
        yield client, app.state.services


def post(client: TestClient, path: str, body: Any, **kwargs: Any) -> Any:
    """POST ``body`` as ASCII JSON: a lone surrogate travels as the escape ``\\ud800``."""
    return client.post(path, content=json.dumps(body), headers=JSON, **kwargs)


def item(rid: str, step: int = 1, output: str = "4", **rollout: Any) -> dict[str, Any]:
    fields = {
        "id": rid,
        "input": "What is 2+2?",
        "output": output,
        "supplemental_context": "4",
        **rollout,
    }
    return {"rollout": fields, "metadata": {"current_step": step}}


def nested(depth: int) -> dict[str, Any]:
    """``{"a": {"a": ... {}}}``: ``depth`` objects, one inside the other."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def state(services: Services) -> dict[str, Any]:
    """What a refused request must leave as it was."""
    return {
        "steps": services.coordinator.snapshot(),
        "records": {step: services.rollouts.count(step) for step in range(4)},
        "counters": dict(services.scorer.counters),
        "rubric_versions": len(services.store.history(None)),
    }


# Where a lone surrogate can hide in a /score body, and the field the answer names.
SURROGATES = [
    (lambda b: b["rollout"].update(output="4" + BAD), "rollout.output"),
    (lambda b: b["rollout"].update(input=BAD), "rollout.input"),
    (lambda b: b["rollout"].update(supplemental_context=BAD), "rollout.supplemental_context"),
    (lambda b: b["rollout"].update(id="r" + BAD), "rollout.id"),
    (lambda b: b["rollout"].update(group_id=BAD), "rollout.group_id"),
    (lambda b: b["rollout"].update(metadata={"k": [BAD]}), "rollout.metadata"),
    (lambda b: b["rollout"].update(metadata={BAD: 1}), "rollout.metadata"),
    (lambda b: b["metadata"].update(other_context=BAD), "metadata.other_context"),
    (lambda b: b["metadata"].update(run={"name": BAD}), "metadata.run"),
]


def refuses_surrogate(message: str) -> bool:
    # pydantic refuses a lone surrogate itself where it counts characters (the id's length
    # bounds); amaris's text type (amaris.models.Text) everywhere else.
    return "lone surrogate" in message or "unable to parse raw data as a unicode" in message


SURROGATE_IDS = [
    "output",
    "input",
    "context",
    "id",
    "group_id",
    "metadata-value",
    "metadata-key",
    "other_context",
    "extra-field",
]


@pytest.mark.parametrize(("plant", "field"), SURROGATES, ids=SURROGATE_IDS)
def test_a_lone_surrogate_is_an_invalid_batch_item_and_stores_nothing(
    tmp_path: Path, plant: Any, field: str
) -> None:
    bad = item("bad")
    plant(bad)
    with serve(make_settings(tmp_path)) as (client, services):
        r = post(client, "/batch_score", {"items": [bad]})
        assert r.status_code == 200, r.text
        [result] = r.json()["results"]
        assert result["status"] == "invalid"
        assert result["reason"].startswith(f"items[0].{field}: ")
        assert refuses_surrogate(result["reason"])
        assert state(services)["records"][1] == 0
        assert client.get("/steps/1/rollouts").status_code == 404  # the step never opened
        assert services.scorer.counters == {}


@pytest.mark.parametrize(("plant", "field"), SURROGATES, ids=SURROGATE_IDS)
def test_a_lone_surrogate_in_score_is_422_naming_the_field(
    tmp_path: Path, plant: Any, field: str
) -> None:
    bad = item("bad")
    plant(bad)
    with serve(make_settings(tmp_path)) as (client, services):
        before = state(services)
        r = post(client, "/score", bad)
        assert r.status_code == 422, r.text
        assert [d["field"] for d in r.json()["detail"]] == [field]
        assert refuses_surrogate(r.json()["detail"][0]["message"])
        assert state(services) == before


def test_a_surrogate_cannot_poison_a_step(tmp_path: Path, prefect_harness: None) -> None:
    # Logged, the item would fail GET /steps/0/rollouts, the step's flow and `amaris
    # export` for good. The step holds the valid item only and goes through the real
    # pipeline.
    settings = make_settings(tmp_path, **{"pipeline.rollouts_per_step": None})
    items = [item("ok", step=0), item("bad", step=0, output="4" + BAD)]
    with serve(settings) as (client, _):
        r = post(client, "/batch_score", {"items": items})
        assert [x["status"] for x in r.json()["results"]] == ["scored", "invalid"]
        reward = post(
            client,
            "/get_reward",
            {"query": ["What is 2+2? 4" + BAD], "prompts": ["What is 2+2?"]},
            params={"step": 0},
        )
        assert reward.status_code == 422
        assert client.post("/complete", json={"step": 0}).status_code == 200
        done = client.get("/rubric_status/wait", params={"step": 0, "timeout": 120}).json()
        assert done["status"] == "unchanged", done
        rollouts = client.get("/steps/0/rollouts")
        assert rollouts.status_code == 200
        assert [rec["rollout"]["id"] for rec in rollouts.json()["records"]] == ["ok"]
        analyses = client.get("/steps/0/analyses").json()
        assert [a["rollout_id"] for a in analyses["analyses"]] == ["ok"]


# -- nesting depth ------------------------------------------------------------------------


def test_nesting_at_the_limit_is_accepted(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as (client, services):
        r = post(client, "/score", item("r", metadata=nested(MAX_JSON_DEPTH)))
        assert r.status_code == 200, r.text
        [record] = services.rollouts.load_step(1)
        assert record.rollout.metadata == nested(MAX_JSON_DEPTH)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 900])
def test_a_deep_item_is_invalid_and_the_batch_is_answered(tmp_path: Path, depth: int) -> None:
    # Not a 500 after the valid item was logged: the deep item is invalid, the batch answered.
    items = [item("ok"), item("deep", metadata=nested(depth))]
    with serve(make_settings(tmp_path)) as (client, services):
        r = post(client, "/batch_score", {"items": items})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert [x["status"] for x in results] == ["scored", "invalid"]
        assert results[1]["reason"].startswith(
            f"items[1].rollout.metadata: is nested deeper than {MAX_JSON_DEPTH} levels"
        )
        assert [rec.rollout.id for rec in services.rollouts.load_step(1)] == ["ok"]
        assert client.get("/steps/1/rollouts").status_code == 200


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 300])
@pytest.mark.parametrize("where", ["rollout.metadata", "metadata.extra"])
def test_a_deep_value_in_score_is_422_naming_the_field(
    tmp_path: Path, depth: int, where: str
) -> None:
    # 300 is past the JSON parser's own nesting limit: the field is named all the same.
    body = item("r")
    section, key = where.split(".")
    body[section][key] = nested(depth)
    with serve(make_settings(tmp_path)) as (client, services):
        before = state(services)
        r = post(client, "/score", body)
        assert r.status_code == 422, r.text
        assert [d["field"] for d in r.json()["detail"]] == [where]
        assert "nested deeper than" in r.json()["detail"][0]["message"]
        assert state(services) == before


def test_non_finite_numbers_in_metadata_are_refused(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as (client, services):
        r = client.post(
            "/score",
            content='{"rollout": {"id": "r", "input": "q", "output": "a", "metadata": {"x": NaN}}}',
            headers=JSON,
        )
        assert r.status_code == 422
        assert r.json()["detail"][0]["field"] == "rollout.metadata"
        assert services.rollouts.count(0) == 0


# -- sizes --------------------------------------------------------------------------------


@pytest.mark.parametrize("oversize", ["reject", "truncate"])
@pytest.mark.parametrize(
    ("plant", "field"),
    [
        (lambda b, n: b["rollout"].update(metadata={"notes": "x" * n}), "rollout.metadata"),
        (lambda b, n: b["metadata"].update(other_context="x" * n), "metadata.other_context"),
        (lambda b, n: b["metadata"].update(high_level_goal="x" * n), "metadata.high_level_goal"),
        (lambda b, n: b["metadata"].update(model_size="x" * n), "metadata.model_size"),
        (lambda b, n: b["metadata"].update(run={"notes": "x" * n}), "metadata.run"),
        (
            lambda b, n: b["metadata"].update({f"k{i}": "x" * (n // 4) for i in range(5)}),
            "metadata",
        ),
    ],
    ids=[
        "rollout-metadata",
        "other_context",
        "high_level_goal",
        "model_size",
        "extra-field",
        "many-extra-fields",
    ],
)
def test_every_free_text_field_is_under_max_field_chars(
    tmp_path: Path, fake_llm: FakeLLM, plant: Any, field: str, oversize: str
) -> None:
    # Unbounded metadata would be accepted, stored and passed to the analyzer. The judged
    # fields alone may be truncated; these are refused under either policy.
    limit = 200
    body = item("r")
    plant(body, limit + 1)
    settings = llm_settings(
        tmp_path, fake_llm, **{"scoring.max_field_chars": limit, "scoring.oversize": oversize}
    )
    with serve(settings) as (client, services):
        before = state(services)
        r = post(client, "/score", body)
        assert r.status_code == 413, r.text
        [detail] = r.json()["detail"]
        assert detail["field"] == field
        assert detail["message"].endswith(f"; the limit is {limit}")
        batch = post(client, "/batch_score", {"items": [body]}).json()["results"]
        assert batch[0]["status"] == "invalid"
        assert batch[0]["reason"].startswith(f"items[0].{field}: ")
        assert state(services) == before
    assert fake_llm.requests == []


def test_a_field_at_the_limit_is_accepted(tmp_path: Path) -> None:
    limit = 200
    body = item("r", metadata={"n": "x" * (limit - len('{"n":""}'))})
    body["metadata"]["other_context"] = "y" * limit
    with serve(make_settings(tmp_path, **{"scoring.max_field_chars": limit})) as (client, _):
        assert post(client, "/score", body).status_code == 200


def test_an_oversize_request_creates_no_per_instance_rubric(tmp_path: Path) -> None:
    # The rubric of a new input is created when it is first scored: not for a request
    # refused for its size.
    settings = make_settings(
        tmp_path, **{"memory.rubrics_mode": "per_instance", "scoring.max_field_chars": 50}
    )
    with serve(settings) as (client, services):
        before = state(services)
        r = post(client, "/score", item("r", input="A new question?", output="x" * 51))
        assert r.status_code == 413
        assert state(services) == before


# -- /get_reward: every sample before any -------------------------------------------------


PROMPT = "What is 2+2?"


def reward_body(*responses: str, **extra: Any) -> dict[str, Any]:
    return {"query": [PROMPT + r for r in responses], "prompts": [PROMPT] * len(responses), **extra}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (reward_body(" 4", " 5" + BAD), "query[1]"),
        ({**reward_body(" 4", " 5"), "prompts": [PROMPT, BAD]}, "prompts[1]"),
        (reward_body(" 4", " 5", labels=["4", {"answer": BAD}]), "labels[1]"),
        (reward_body(" 4", " 5", labels=["4", nested(MAX_JSON_DEPTH + 1)]), "labels[1]"),
        (reward_body(" 4", " 5", group_ids=["g", BAD]), "group_ids[1]"),
        (
            reward_body(" 4", " 5", amaris_metadata={"other_context": BAD}),
            "amaris_metadata.other_context",
        ),
        (reward_body(" 4", " " + "5" * 300), "query[1]"),
        (reward_body(" 4", " 5", labels=["4", "5" * 300]), "labels[1]"),
        (
            reward_body(" 4", " 5", amaris_metadata={"high_level_goal": "g" * 300}),
            "amaris_metadata",
        ),
    ],
    ids=[
        "surrogate-query",
        "surrogate-prompt",
        "surrogate-label",
        "deep-label",
        "surrogate-group",
        "surrogate-metadata",
        "oversize-response",
        "oversize-label",
        "oversize-metadata",
    ],
)
def test_get_reward_checks_every_sample_before_scoring_any(
    tmp_path: Path, fake_llm: FakeLLM, body: dict[str, Any], field: str
) -> None:
    # Nothing is judged or logged before the batch is refused (else OpenRLHF's retries
    # would log the valid sample again under a fresh id).
    settings = llm_settings(tmp_path, fake_llm, **{"scoring.max_field_chars": 200})
    with serve(settings) as (client, services):
        before = state(services)
        r = post(client, "/get_reward", body, params={"step": 1})
        assert r.status_code == 422, r.text
        assert [d["field"] for d in r.json()["detail"]] == [field]
        assert state(services) == before
    assert fake_llm.requests == []


def test_get_reward_names_every_bad_sample_at_once(tmp_path: Path) -> None:
    body = reward_body(" 4", " 5", " " + "6" * 300, " 7")
    body["query"][1] = "no prompt here"
    with serve(make_settings(tmp_path, **{"scoring.max_field_chars": 200})) as (client, services):
        before = state(services)
        r = post(client, "/get_reward", body, params={"step": 1})
        assert r.status_code == 422
        detail = r.json()["detail"]
        assert [d["field"] for d in detail] == ["query[1]", "query[2]"]
        assert "does not contain prompts[1]" in detail[0]["message"]
        assert "has 301 characters; the limit is 200" in detail[1]["message"]
        assert state(services) == before
