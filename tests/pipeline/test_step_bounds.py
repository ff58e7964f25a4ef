"""Step numbers are bounded: ``pipeline.max_step``, ``max_steps_ahead``, ``max_open_steps``,
and ``POST /complete`` of a step without rollouts only for the next step. A refused step
is answered before the judge is called and changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amaris.app.wiring import create_app
from amaris.memory.qdrant import open_qdrant
from amaris.memory.rollout_log import StepRegistry
from amaris.offline.judge import respond
from amaris.sim.judge_server import Reply
from tests.support.api import NOOP
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.replicas import replicas
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

BOUNDS = {"pipeline.max_step": 100, "pipeline.max_steps_ahead": 10, "pipeline.max_open_steps": 3}


def body(step: Any, rid: str = "r") -> dict[str, Any]:
    """A /score body; its output names ``rid``, so no two rollouts share a verdict (cache)."""
    output = f"4 ({rid})"
    return {
        "rollout": {
            "id": rid,
            "input": "What is 2+2?",
            "output": output,
            "supplemental_context": "4",
        },
        "metadata": {"current_step": step},
    }


def steps(client: TestClient) -> dict[int, str]:
    return {s["step"]: s["status"] for s in client.get("/steps").json()}


def refused(response: Any, status: int, field: str, words: str) -> None:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert [d["field"] for d in detail] == [field], detail
    assert words in detail[0]["message"], detail


def test_steps_past_max_step_are_refused_before_the_judge(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    with serve(llm_settings(tmp_path, fake_llm, **BOUNDS)) as client:
        for step in (101, 2**63, 10**4000):
            response = client.post("/score", json=body(step))
            refused(response, 422, "metadata.current_step", "pipeline.max_step (100)")
            assert len(response.content) < 1000  # a huge number is not echoed
        assert fake_llm.requests == []
        assert steps(client) == {}
        assert client.get("/healthz").json()["counters"].get("scored", 0) == 0
        assert client.post("/score", json=body(100)).json()["status"] == "scored"
        assert steps(client) == {100: "open"}


def test_a_new_step_may_be_at_most_max_steps_ahead_of_the_newest(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    with serve(llm_settings(tmp_path, fake_llm, **BOUNDS)) as client:
        # the first step may be anywhere (a run resumed from a checkpoint)
        assert client.post("/score", json=body(40)).status_code == 200
        refused(
            client.post("/score", json=body(51)),
            422,
            "metadata.current_step",
            "more than pipeline.max_steps_ahead (10) past the newest step (40)",
        )
        assert len(fake_llm.requests) == 1
        assert client.post("/score", json=body(50)).status_code == 200
        assert client.post("/score", json=body(60)).status_code == 200  # 10 past 50
        assert client.post("/score", json=body(3)).status_code == 409  # 3 open already
        assert steps(client) == {40: "open", 50: "open", 60: "open"}


def test_open_steps_are_bounded_and_known_steps_still_take_rollouts(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    with serve(llm_settings(tmp_path, fake_llm, **BOUNDS)) as client:
        for step in (0, 1, 2):
            assert client.post("/score", json=body(step, f"r{step}")).status_code == 200
        judged = len(fake_llm.requests)
        response = client.post("/score", json=body(3, "r3"))
        refused(response, 409, "metadata.current_step", "pipeline.max_open_steps")
        assert response.json()["error"] == "too_many_open_steps"
        assert len(fake_llm.requests) == judged
        assert client.post("/score", json=body(1, "again")).status_code == 200  # known step
        assert steps(client) == {0: "open", 1: "open", 2: "open"}
        records = client.get("/steps/1/rollouts").json()["records"]
        assert [r["rollout"]["id"] for r in records] == ["r1", "again"]


def slow(request: dict[str, Any]) -> Reply:
    return Reply(content=respond(request["messages"]), delay_s=0.3)


def test_concurrent_rollouts_cannot_open_more_than_max_open_steps(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # Every item is admitted before any is logged: admitted new steps count as open.
    fake_llm.push(*[slow] * 8)
    with serve(llm_settings(tmp_path, fake_llm, **BOUNDS)) as client:
        items = [body(step, f"r{step}") for step in range(8)]
        results = client.post("/batch_score", json={"items": items}).json()["results"]
        statuses = [r["status"] for r in results]
        assert statuses.count("scored") == 3, results
        assert len(fake_llm.requests) == 3
        assert len(steps(client)) == 3
        for result in results:
            if result["status"] == "invalid":
                assert "].metadata.current_step: " in result["reason"]
                assert "pipeline.max_open_steps" in result["reason"]


def test_batch_items_with_a_refused_step_are_invalid_and_not_logged(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    with serve(llm_settings(tmp_path, fake_llm, **BOUNDS)) as client:
        items = [body(1, "ok"), body(2**63, "big")]
        results = client.post("/batch_score", json={"items": items}).json()["results"]
        assert [r["status"] for r in results] == ["scored", "invalid"]
        assert results[1]["reason"].startswith("items[1].metadata.current_step: ")
        assert len(fake_llm.requests) == 1
        records = client.get("/steps/1/rollouts").json()["records"]
        assert [r["rollout"]["id"] for r in records] == ["ok"]
        assert steps(client) == {1: "open"}


def test_get_reward_names_the_header_or_query_parameter_of_a_refused_step(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    reward = {"query": ["What is 2+2? 4"], "prompts": ["What is 2+2?"], "labels": ["4"]}
    with serve(llm_settings(tmp_path, fake_llm, **BOUNDS)) as client:
        refused(
            client.post("/get_reward", json=reward, headers={"X-Amaris-Step": "101"}),
            422,
            "X-Amaris-Step",
            "pipeline.max_step",
        )
        refused(
            client.post("/get_reward", json=reward, params={"step": str(10**4000)}),
            422,
            "step",
            "pipeline.max_step",
        )
        assert fake_llm.requests == []
        assert steps(client) == {}
        for step in (0, 1, 2):
            sample = {"query": [f"What is 2+2? 4 ({step})"], "prompts": ["What is 2+2?"]}
            assert client.post("/get_reward", json=sample, params={"step": step}).status_code == 200
        refused(
            client.post("/get_reward", json=reward, headers={"X-Amaris-Step": "3"}),
            409,
            "X-Amaris-Step",
            "pipeline.max_open_steps",
        )
        assert len(fake_llm.requests) == 3


def test_get_reward_default_step_ignores_steps_past_max_step(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)):
        pass  # a first start writes the rubric (a store with steps and no rubric is damaged)
    # A store written before the bound existed holds a junk open step.
    qdrant = open_qdrant(settings.memory)
    try:
        StepRegistry(qdrant, settings.memory.collection).set(2**62, status="open")
    finally:
        qdrant.close()
    reward = {"query": ["What is 2+2? 4"], "prompts": ["What is 2+2?"]}
    with TestClient(create_app(settings)) as client:
        assert steps(client) == {2**62: "open"}
        answer = client.post("/get_reward", json=reward)
        assert answer.status_code == 200, answer.text
        assert answer.json()["step"] == 0


@pytest.mark.usefixtures("prefect_harness")
def test_complete_of_a_step_without_rollouts_only_for_the_next_step(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path, **BOUNDS)) as client:
        refused(
            client.post("/complete", json={"step": 5}),
            409,
            "step",
            "step 5 has no rollouts and is not the next step (0)",
        )
        assert client.post("/complete", json={"step": 5}).json()["error"] == "nothing_to_complete"
        refused(
            client.post("/complete", json={"step": 5493727}), 422, "step", "pipeline.max_step (100)"
        )
        assert steps(client) == {}
        assert client.post("/score", json=body(3)).status_code == 200
        for junk in (0, 2, 5, 99):
            refused(
                client.post("/complete", json={"step": junk}),
                409,
                "step",
                "is not the next step (4)",
            )
        assert steps(client) == {3: "open"}
        # the reference client's flow: /complete without a body completes the open steps
        assert client.post("/complete", json={}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 3, "timeout": 120}).json()
        assert done["status"] == "unchanged", done
        # the next step may be completed without rollouts (a trainer's empty step)
        assert client.post("/complete", json={"step": 4}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 4, "timeout": 120}).json()
        assert done["status"] == "unchanged", done
        assert steps(client) == {3: "done", 4: "done"}


def test_complete_past_max_step_is_refused_even_when_steps_complete_by_themselves(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, **BOUNDS, **{"pipeline.rollouts_per_step": 4})
    with serve(settings) as client:
        refused(client.post("/complete", json={"step": 101}), 422, "step", "pipeline.max_step")
        assert client.post("/complete", json={"step": 7}).json() == NOOP
        assert steps(client) == {}


@pytest.mark.usefixtures("prefect_harness")
def test_a_replica_bounds_new_steps_on_the_shared_registry(tmp_path: Path) -> None:
    bounds = {**BOUNDS, "pipeline.max_open_steps": 2}
    with replicas(tmp_path, ["r1", "r2"], **bounds) as ((a, b), _):
        for step in (50, 51):
            assert a.post("/score", json=body(step, f"a{step}")).status_code == 200
        # b has taken no rollout: what it knows of the steps comes from the registry
        refused(
            b.post("/score", json=body(62, "b62")),
            422,
            "metadata.current_step",
            "past the newest step (51)",
        )
        refused(
            b.post("/score", json=body(52, "b52")),
            409,
            "metadata.current_step",
            "pipeline.max_open_steps",
        )
        assert b.post("/score", json=body(51, "b51")).status_code == 200
        assert steps(a) == {50: "open", 51: "open"}
