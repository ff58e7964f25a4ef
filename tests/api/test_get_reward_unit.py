"""``POST /get_reward`` (``api/routes/openrlhf.py``) on the real app, Qdrant in memory: the
answer OpenRLHF reads, the lists' lengths and sizes, the step (header, query, open step),
where each refused sample's problem is named, the 503 of an unscored batch and the neutral
answer. The judge is the offline one, or a scripted provider at the gateway seam
(tests/support/scripted_llm.py) for the judge's failure. Needs no fixture of tests/conftest.py
(mutation testing runs it with ``--noconftest``: bench/evaluations/mutation.py
``openrlhf_route``); tests/api/test_input_validation.py, test_get_reward_sizes.py and the
OpenRLHF contract files still cover the route in the suite.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from qdrant_client import QdrantClient

from amaris.client import STEP_HEADER
from amaris.llm.gateway import build_providers
from amaris.llm.providers import Completion
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import StepRegistry
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog
from amaris.services import Services
from amaris.settings import load_settings
from amaris.steps.coordinator import StepCoordinator
from amaris.steps.outcomes import StepRun
from api.routes.openrlhf import current_step
from tests.support.app import in_memory_app
from tests.support.scripted_llm import Call, ScriptedProvider, verdicts
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

PROMPT = "What is 2+2?"
BAD = "\ud800"
"""A lone surrogate: ``"\\ud800"`` once JSON-encoded, which ``json.loads`` accepts."""


def judge(call: Call) -> Completion:
    """Every criterion 3, but 1 for a response containing ``5``."""
    score = 1 if "5" in call.rollout()["output"] else 3
    return verdicts(*((c["id"], score) for c in call.criteria()))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # No developer key or AMARIS_* setting may reach the app (tests/conftest.py does the
    # same for the suite).
    for name in list(os.environ):
        if name.upper().startswith(("AMARIS_", "OPENAI_")):
            monkeypatch.delenv(name)


@contextmanager
def serve(
    tmp_path: Path, scorer: ScriptedProvider | None = None, **overrides: Any
) -> Iterator[tuple[TestClient, Services]]:
    settings = make_settings(tmp_path, **overrides)
    providers = {**build_providers(settings), "scorer": scorer} if scorer is not None else None
    with TestClient(in_memory_app(settings, providers=providers)) as client:
        yield client, client.app.state.services


def body(*responses: str, **extra: Any) -> dict[str, Any]:
    return {"query": [PROMPT + r for r in responses], "prompts": [PROMPT] * len(responses), **extra}


def records(services: Services, step: int) -> list[RolloutRecord]:
    return list(services.rollouts.load_step(step))


def fields(answer: httpx.Response) -> list[str]:
    return [d["field"] for d in answer.json()["detail"]]


def test_the_answer_openrlhf_reads_and_the_samples_logged(tmp_path: Path) -> None:
    scorer = ScriptedProvider(default=judge)
    with serve(tmp_path, scorer) as (client, services):
        first = client.post("/get_reward", json=body(" 4", " 5", labels=["4", {"a": "é"}]))
        assert first.status_code == 200, first.text
        again = client.post("/get_reward", json=body(" 4", labels=["4"]))
        logged = records(services, 0)
    answer = first.json()
    assert set(answer) == {"rewards", "scores", "extra_logs", "step", "statuses", "reward_vectors"}
    assert answer["step"] == 0
    assert answer["statuses"] == ["scored", "scored"]
    assert answer["scores"] == answer["rewards"]
    assert answer["rewards"][0] > answer["rewards"][1]
    assert answer["extra_logs"] == {
        "amaris_rubric_version": [1.0, 1.0],
        "amaris_unscored": [0.0, 0.0],
        "amaris_cached": [0.0, 0.0],
    }
    assert again.json()["extra_logs"]["amaris_cached"] == [1.0]
    assert again.json()["rewards"] == answer["rewards"][:1]
    assert len(scorer.calls) == 2
    assert [(r.rollout.input, r.rollout.output) for r in logged] == [
        (PROMPT, " 4"),
        (PROMPT, " 5"),
        (PROMPT, " 4"),  # each sample is logged, a cached one too
    ]
    assert [r.rollout.supplemental_context for r in logged] == ["4", '{"a": "é"}', "4"]
    assert [r.rollout.group_id for r in logged] == [None, None, None]
    assert all(re.fullmatch(r"get_reward-[0-9a-f]{16}", r.rollout.id) for r in logged)
    assert len({r.rollout.id for r in logged}) == 3


def test_group_ids_run_metadata_and_no_labels(tmp_path: Path) -> None:
    run = {"high_level_goal": "add", "model_size": "7B", "total_steps": 9, "other_context": "x"}
    with serve(tmp_path) as (client, services):
        r = client.post(
            "/get_reward", json=body(" 4", " 5", group_ids=["g1", "g2"], amaris_metadata=run)
        )
        assert r.status_code == 200, r.text
        logged = records(services, 0)
    assert [rec.rollout.group_id for rec in logged] == ["g1", "g2"]
    assert [rec.rollout.supplemental_context for rec in logged] == [None, None]
    assert [rec.metadata for rec in logged] == [{**run, "current_step": 0}] * 2


# -- the lists -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["prompts", "labels", "group_ids"])
@pytest.mark.parametrize("count", [1, 3])
def test_a_list_not_as_long_as_query_is_named(tmp_path: Path, name: str, count: int) -> None:
    sent = body(" 4", " 5")
    sent[name] = [PROMPT] * count
    with serve(tmp_path) as (client, services):
        r = client.post("/get_reward", json=sent)
        assert records(services, 0) == []
    assert r.status_code == 422
    assert r.json()["detail"] == [{"field": name, "message": f"has {count} items; query has 2"}]


def test_an_empty_batch_is_refused_naming_query(tmp_path: Path) -> None:
    with serve(tmp_path) as (client, _):
        r = client.post("/get_reward", json={"query": [], "prompts": []})
    assert r.status_code == 422
    assert fields(r) == ["query"]


def test_lists_as_long_as_query_past_256_samples_are_not_refused_for_length(
    tmp_path: Path,
) -> None:
    # Lengths compared by value: 257 prompts for 257 queries pass the length check and are
    # refused only by server.max_batch_items, naming query.
    responses = [f" {i}" for i in range(257)]
    with serve(tmp_path, **{"server.max_batch_items": 256}) as (client, services):
        r = client.post("/get_reward", json=body(*responses, labels=["4"] * 257))
        assert records(services, 0) == []
    assert r.status_code == 413, r.text
    assert r.json()["detail"] == [
        {"field": "query", "message": "query has 257 items; the limit is 256"}
    ]


@pytest.mark.parametrize("oversize", ["reject", "truncate"])
def test_prompts_up_to_the_limit_and_queries_up_to_twice_it(tmp_path: Path, oversize: str) -> None:
    limit = 200
    prompt = "p" * limit
    sent = {
        "query": [prompt + "r" * limit, prompt + "r" * (limit + 1), prompt[1:] + "?" * 2],
        "prompts": [prompt, prompt, "q" + prompt[1:]],
    }
    settings = {"scoring.max_field_chars": limit, "scoring.oversize": oversize}
    with serve(tmp_path, **settings) as (client, _):
        r = client.post("/get_reward", json=sent)
        long_prompt = client.post(
            "/get_reward", json={"query": ["p" * 201 + "r"], "prompts": ["p" * 201]}
        )
    if oversize == "truncate":
        assert (r.status_code, long_prompt.status_code) == (200, 200), (r.text, long_prompt.text)
        return
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {
            "field": "query[1]",
            "message": "has 401 characters; the limit is 400 (prompt and response)",
        }
    ]
    assert long_prompt.status_code == 422
    assert long_prompt.json()["detail"][0] == {
        "field": "prompts[0]",
        "message": "has 201 characters; the limit is 200",
    }


def test_every_query_without_its_prompt_is_named(tmp_path: Path) -> None:
    sent = body(" 4", " 5", " 6")
    sent["query"][0] = "no prompt here"
    sent["query"][2] = "nor here"
    with serve(tmp_path) as (client, services):
        r = client.post("/get_reward", json=sent)
        assert records(services, 0) == []
    assert r.status_code == 422
    assert fields(r) == ["query[0]", "query[2]"]
    for detail, i in zip(r.json()["detail"], (0, 2), strict=True):
        assert detail["message"].startswith(f"does not contain prompts[{i}]: a query is the prompt")


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"prompts": [PROMPT, BAD]}, "prompts[1]", "has a lone surrogate (U+D800)"),
        ({"labels": ["4", "5" * 300]}, "labels[1]", "items[1].rollout.supplemental_context: "),
        ({"group_ids": ["g", "g" * 513]}, "group_ids[1]", "items[1].rollout.group_id: "),
        (
            {"query": [PROMPT + " 4", PROMPT + " " + "5" * 300]},
            "query[1]",
            "items[1].rollout.output",
        ),
    ],
    ids=["prompt", "label", "group", "response"],
)
def test_a_refused_sample_names_the_list_it_came_from(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    sent = json.dumps({**body(" 4", " 5"), **change})  # a lone surrogate as JSON's escape
    with serve(tmp_path, **{"scoring.max_field_chars": 200}) as (client, services):
        r = client.post("/get_reward", content=sent, headers={"content-type": "application/json"})
        assert records(services, 0) == []
    assert r.status_code == 422, r.text
    assert fields(r) == [field]
    assert r.json()["detail"][0]["message"].startswith(message)


def test_bad_run_metadata_is_named_once_for_the_batch(tmp_path: Path) -> None:
    sent = body(" 4", " 5", " 6", amaris_metadata={"other_context": "c" * 300})
    with serve(tmp_path, **{"scoring.max_field_chars": 200}) as (client, _):
        r = client.post("/get_reward", json=sent)
    assert r.status_code == 422
    assert fields(r) == ["amaris_metadata"]
    assert r.json()["detail"][0]["message"].startswith("items[0].metadata.other_context")


def test_bad_run_metadata_is_named_after_a_query_without_its_prompt(tmp_path: Path) -> None:
    sent = body(" 4", " 5", amaris_metadata={"other_context": "c" * 300})
    sent["query"][0] = "no prompt here"
    with serve(tmp_path, **{"scoring.max_field_chars": 200}) as (client, _):
        r = client.post("/get_reward", json=sent)
    assert r.status_code == 422
    assert fields(r) == ["query[0]", "amaris_metadata"]


def test_total_steps_zero_is_a_run_negative_is_refused(tmp_path: Path) -> None:
    with serve(tmp_path) as (client, services):
        zero = client.post("/get_reward", json=body(" 4", amaris_metadata={"total_steps": 0}))
        negative = client.post("/get_reward", json=body(" 5", amaris_metadata={"total_steps": -1}))
        logged = records(services, 0)
    assert zero.status_code == 200, zero.text
    assert negative.status_code == 422
    assert negative.json()["detail"] == [
        {
            "field": "amaris_metadata.total_steps",
            "message": "Input should be greater than or equal to 0",
        }
    ]
    assert [(r.rollout.output, r.metadata["total_steps"]) for r in logged] == [(" 4", 0)]


def exact_rule_per_prompt(tmp_path: Path) -> dict[str, str]:
    """Settings of a ``per_instance`` service whose rubric for PROMPT is one ``exact`` rule
    (the reference answer needed); the global rubric has none."""
    presets = tmp_path / "presets.json"
    rule = {"text": "The final answer is right.", "weight": 1.0, "rule": {"kind": "exact"}}
    presets.write_text(json.dumps({PROMPT: [rule]}))
    return {
        "memory.rubrics_mode": "per_instance",
        "memory.per_instance_rubrics_path": str(presets),
    }


def test_a_sample_refused_while_scored_is_a_422_naming_its_label(tmp_path: Path) -> None:
    # The global rubric has no rule; the prompt's own rubric (per_instance) compares with the
    # reference answer: a sample without a label is refused as it is scored, not before.
    settings = exact_rule_per_prompt(tmp_path)
    with serve(tmp_path, **settings) as (client, _):
        refused = client.post("/get_reward", json=body(" 4", " 5"))
        labelled = client.post("/get_reward", json=body(" 4", " 5", labels=["4", "4"]))
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"] == "invalid_request"
    assert fields(refused) == ["labels[0]", "labels[1]"]
    assert all("reference answer" in d["message"] for d in refused.json()["detail"])
    assert labelled.status_code == 200, labelled.text
    assert labelled.json()["rewards"] == [1.0, 0.0]


def test_a_batch_refused_for_one_samples_rubric_scores_and_logs_none(tmp_path: Path) -> None:
    # One sample gives its label, the other does not: the prompt's own rubric (not created
    # yet) needs one. The batch is refused as a whole, so nothing of it is judged, logged,
    # or created, the other sample's rubric version included.
    settings = exact_rule_per_prompt(tmp_path)
    scorer = ScriptedProvider(default=judge)
    with serve(tmp_path, scorer, **settings) as (client, services):
        refused = client.post("/get_reward", json=body(" 4", " 5", labels=["4", ""]))
        logged = records(services, 0)
        scope = services.scopes.scope_of(PROMPT)
        created = services.store.is_cached(scope)
    assert refused.status_code == 422, refused.text
    assert fields(refused) == ["labels[1]"]
    assert "reference answer" in refused.json()["detail"][0]["message"]
    assert logged == []
    assert not created
    assert scorer.calls == []


# -- the step ------------------------------------------------------------------------------


class NeverEnding:
    """The coordinator's launcher: a run that never ends (its step stays ``completing``)."""

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        return concurrent.futures.Future()


async def test_the_step_of_a_request_without_one() -> None:
    # The real coordinator over real stores; only the step's run is left pending.
    qdrant = QdrantClient(":memory:")
    log = SqliteRolloutLog(":memory:", "t")
    steps = StepRegistry(qdrant, "t")
    coordinator = StepCoordinator(load_settings(None), log, steps, NeverEnding())
    record = RolloutRecord.model_validate({"rollout": {"id": "r", "input": "i", "output": "o"}})
    try:
        assert current_step(coordinator, 5) == 0  # none known: the first
        await coordinator.record(1, record)
        await coordinator.record(3, record)
        assert coordinator.snapshot() == {1: "open", 3: "open"}
        assert current_step(coordinator, 5) == 3  # the latest open step
        await coordinator.complete(3)
        assert current_step(coordinator, 5) == 1  # an open step, even before a completing one
        await coordinator.complete(1)
        assert coordinator.snapshot() == {1: "completing", 3: "completing"}
        assert current_step(coordinator, 5) == 4  # none open: the one after the latest
        await coordinator.record(5, record)
        assert current_step(coordinator, 5) == 5  # at pipeline.max_step: counted
        assert current_step(coordinator, 4) == 4  # over it: left out
    finally:
        await coordinator.close()
        log.close()
        qdrant.close()


def test_the_header_else_the_query_else_the_open_step(tmp_path: Path) -> None:
    with serve(tmp_path) as (client, services):
        both = client.post(
            "/get_reward", json=body(" 4"), headers={STEP_HEADER: "2"}, params={"step": 5}
        )
        query = client.post("/get_reward", json=body(" 5"), params={"step": 1})
        query_zero = client.post("/get_reward", json=body(" 8"), params={"step": 0})
        # Steps 1 and 2 are open: a request without a step goes to the latest.
        open_step = client.post("/get_reward", json=body(" 6"))
        zero = client.post("/get_reward", json=body(" 7"), headers={STEP_HEADER: "0"})
        logged = {step: [r.rollout.output for r in records(services, step)] for step in range(6)}
    assert [a.json()["step"] for a in (both, query, query_zero, open_step, zero)] == [2, 1, 0, 2, 0]
    assert logged == {0: [" 8", " 7"], 1: [" 5"], 2: [" 4", " 6"], 3: [], 4: [], 5: []}


@pytest.mark.parametrize(
    ("headers", "params", "field"),
    [
        ({STEP_HEADER: "9"}, {}, STEP_HEADER),
        ({}, {"step": 9}, "step"),
        ({STEP_HEADER: "9"}, {"step": 1}, STEP_HEADER),
        ({}, {"step": -1}, "query.step"),
        ({STEP_HEADER: "-1"}, {}, f"header.{STEP_HEADER}"),
    ],
    ids=["header", "query", "both", "negative-query", "negative-header"],
)
def test_a_refused_step_names_where_it_came_from(
    tmp_path: Path, headers: dict[str, str], params: dict[str, int], field: str
) -> None:
    with serve(tmp_path, **{"pipeline.max_step": 5}) as (client, services):
        r = client.post("/get_reward", json=body(" 4"), headers=headers, params=params)
        assert records(services, 9) == []
    assert r.status_code == 422, r.text
    assert fields(r) == [field]


# -- unscored samples ----------------------------------------------------------------------


def unavailable() -> openai.AuthenticationError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(401, request=request)
    return openai.AuthenticationError("bad key", response=response, body=None)


@pytest.mark.parametrize("on_failure", ["null", "error", "neutral"])
def test_an_unscored_batch_is_a_503_unless_neutral(tmp_path: Path, on_failure: str) -> None:
    settings: dict[str, Any] = {"scoring.on_failure": on_failure, "scoring.retry_after_seconds": 7}
    if on_failure == "neutral":
        settings["scoring.neutral_score"] = 0.25
    with serve(tmp_path, ScriptedProvider(default=unavailable()), **settings) as (client, _):
        r = client.post("/get_reward", json=body(" 4", " 5"))
    answer = r.json()
    assert answer["statuses"] == ["unscored", "unscored"]
    assert answer["extra_logs"]["amaris_unscored"] == [1.0, 1.0]
    assert answer["extra_logs"]["amaris_rubric_version"] == [1.0, 1.0]
    if on_failure == "neutral":
        assert r.status_code == 200
        assert answer["rewards"] == answer["scores"] == [0.25, 0.25]
        assert "detail" not in answer
        return
    assert r.status_code == 503
    assert r.headers["retry-after"] == "7"
    assert answer["error"] == "unscored"
    assert answer["rewards"] == [None, None]
    assert fields(r) == ["query[0]", "query[1]"]
    assert all(d["message"] and d["message"] != "unscored" for d in answer["detail"])


def test_the_openapi_schema_documents_the_503_body(tmp_path: Path) -> None:
    # Clients generated from /openapi.json read the unscored batch's body from it.
    with serve(tmp_path) as (client, _):
        responses = client.get("/openapi.json").json()["paths"]["/get_reward"]["post"]["responses"]
    unscored = responses["503"]["content"]["application/json"]["schema"]
    assert unscored == {"$ref": "#/components/schemas/UnscoredBatchResponse"}
    assert {"200", "422", "503"} <= set(responses)
