"""Step control from the client, sync mode, per-instance mode, and re-runs that reuse work."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from amaris import RewardClient, StepFailedError
from amaris.rubric.scopes import input_id
from amaris.sim.judge_server import Reply
from tests.support.agents import HACKED, agent_of, calls_by_agent
from tests.support.app import in_memory_app, serve
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.pipeline_helpers import metadata, rollout, score_step, step_run_view
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

pytestmark = pytest.mark.usefixtures("prefect_harness")


async def test_client_step_control_auto_complete(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, **{"pipeline.rollouts_per_step": 6})
    with serve_in_thread(in_memory_app(settings)) as url:
        async with RewardClient(url, timeout=30) as client:
            scores = await asyncio.gather(
                *(client.score_async(rollout(1, i, b), metadata(1)) for i, b in enumerate(HACKED))
            )
            assert scores == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
            # the sixth rollout completed step 1 by itself: /complete is a no-op
            assert await client.rollouts_complete_async() == "noop"
            assert client.rollouts_complete() == "noop"
            done = await client.rubric_updated_async(timeout=120)
            assert (done.status, done.step, done.mode) == ("updated", 1, "global")
            again = client.rubric_updated(step=1)
            assert again.scopes is not None and again.scopes["global"].outcome == "published"
            after = await client.score_detailed_async(rollout(2, 0, "hacking"), metadata(2))
            assert (after.score, after.rubric_version) == (0.0, 2)


def test_sync_mode_returns_the_reward_under_the_new_rubric(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, **{"pipeline.mode": "sync", "pipeline.rollouts_per_step": 6})
    app = in_memory_app(settings)
    with TestClient(app) as client:
        # /batch_score submits the step's rollouts concurrently, as sync mode requires
        results = score_step(client, 1, HACKED)
        assert {r["rubric_version"] for r in results} == {2}
        assert [r["score"] for r in results] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_per_instance_mode_evolves_each_input(tmp_path: Path) -> None:
    presets = tmp_path / "presets.json"
    question = rollout(1, 1, "correct")["input"]
    presets.write_text(
        json.dumps({question: [{"text": "The response shows its reasoning.", "weight": 0.5}]})
    )
    settings = make_settings(
        tmp_path,
        **{"memory.rubrics_mode": "per_instance", "memory.per_instance_rubrics_path": str(presets)},
    )
    app = in_memory_app(settings)
    # two prompts; only the first one's answers hack
    behaviours = ["hacking", "correct", "hacking", "correct"]
    items = [
        {"rollout": {**rollout(1, i % 2, b), "id": f"r{i}"}, "metadata": metadata(1)}
        for i, b in enumerate(behaviours)
    ]
    with TestClient(app) as client:
        results = client.post("/batch_score", json={"items": items}).json()["results"]
        # the second prompt's preset adds "shows its reasoning" (weight 0.5); its answers
        # show one reasoning marker of three: verdict 1 of 4 -> (1 + 0.5 * 0.25) / 1.5
        assert [r["score"] for r in results] == [1.0, 0.75, 1.0, 0.75]
        assert client.post("/complete", json={}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"timeout": 120}).json()
        assert done["mode"] == "per_instance"
        first, second = input_id(items[0]["rollout"]["input"]), input_id(question)
        assert set(done["scopes"]) == {first, second}
        assert done["scopes"][first]["outcome"] == "published"
        assert done["scopes"][second]["outcome"] == "unchanged"
        store = app.state.services.store
        assert [c.weight for c in store.current(first).adaptive] == [-1.0]
        assert [c.text for c in store.current(second).adaptive] == [
            "The response shows its reasoning."
        ]
        assert store.current("global").adaptive == ()


def test_failed_update_rerun_reuses_finished_work(tmp_path: Path, fake_llm: FakeLLM) -> None:
    def updater_down(body: dict[str, Any]) -> Reply:
        return Reply(status=503) if agent_of(body) == "updater" else offline_reply(body)

    fake_llm.default = updater_down
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "pipeline.task_retries": 1,
            "pipeline.task_retry_delays_seconds": [0.01],
            "memory.embedding_model": "hashing",
        },
    )
    app = in_memory_app(settings)
    try:
        with TestClient(app) as client:
            score_step(client, 1, HACKED)
            assert client.post("/complete", json={}).json() == {"status": "complete"}
            failed = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120})
            assert failed.json()["status"] == "failed"
            assert "updater" in failed.json()["error"]
            first = calls_by_agent(fake_llm)
            # every rollout analysed once; the updater tried twice (1 retry) and failed
            assert first == {
                "scorer": 6,
                "analyzer": 6,
                "summarizer": 1,
                "query_generator": 1,
                "updater": 2,
            }
            fake_llm.default = offline_reply
            fake_llm.requests.clear()
            assert client.post("/complete", json={"step": 1}).json() == {"status": "complete"}
            done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
            assert done["status"] == "updated"
            assert done["scopes"]["global"]["outcome"] == "published"
            # the re-run repeated only the call that had failed, then the rubric canary
            # judged the candidate (never cached): the sure prompt's reference (2 calls),
            # its failing rollout and the phrase probe (1 each)
            assert calls_by_agent(fake_llm) == {"updater": 1, "scorer": 4}
    finally:
        fake_llm.default = offline_reply


def test_client_raises_when_a_step_failed(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = lambda body: (
        Reply(status=400) if agent_of(body) == "analyzer" else offline_reply(body)
    )
    settings = llm_settings(tmp_path, fake_llm, **{"memory.embedding_model": "hashing"})
    try:
        with serve_in_thread(in_memory_app(settings)) as url:

            async def score_one() -> None:
                async with RewardClient(url, timeout=30) as scoring:
                    await scoring.score_async(rollout(0, 0, "correct"), metadata(0))

            asyncio.run(score_one())
            # the step-control methods are plain blocking calls, usable outside a loop
            client = RewardClient(url, timeout=30)
            assert client.rollouts_complete() == "complete"
            with pytest.raises(StepFailedError, match="step 0 failed"):
                client.rubric_updated(timeout=120)
    finally:
        fake_llm.default = offline_reply


@pytest.mark.parametrize("failure", ["timeout", "server_error"])
@pytest.mark.parametrize("agent", ["analyzer", "updater"])
def test_a_step_survives_one_transient_judge_failure(
    tmp_path: Path, fake_llm: FakeLLM, failure: str, agent: str
) -> None:
    # A slow self-hosted judge times out now and then: the task's retry policy takes
    # a timeout as it takes a 5xx, and the step completes instead of failing.
    failed = {agent: False}

    def fails_once(body: dict[str, Any]) -> Reply:
        if agent_of(body) == agent and not failed[agent]:
            failed[agent] = True
            if failure == "timeout":  # longer than the agent's timeout (2 s in tests)
                return Reply(content=offline_reply(body).content, delay_s=4.0)
            return Reply(status=503)
        return offline_reply(body)

    fake_llm.default = fails_once
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "pipeline.task_retries": 1,
            "pipeline.task_retry_delays_seconds": [0.01],
            "memory.embedding_model": "hashing",
        },
    )
    try:
        with serve(settings) as client:
            score_step(client, 1, HACKED)
            assert client.post("/complete", json={}).json() == {"status": "complete"}
            done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
            assert done["status"] == "updated", done
            calls = calls_by_agent(fake_llm)
            # only the failed call is made again (the chunk's other analyses are kept)
            once = 1 if agent == "updater" else len(HACKED)
            assert calls[agent] == once + 1, calls
    finally:
        fake_llm.default = offline_reply


def test_a_slow_judge_makes_a_step_late_not_failed(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # An overloaded self-hosted judge: every analysis takes longer than the agent's timeout
    # (2 s in tests) twice over, and the update once. The default task retries (3) outlast
    # it, and the step's run says how long it waited on the judge and why.
    slow = {"analyzer": 2 * len(HACKED), "updater": 1}

    def overloaded(body: dict[str, Any]) -> Reply:
        agent = agent_of(body)
        if slow.get(agent, 0) > 0:
            slow[agent] -= 1
            return Reply(content=offline_reply(body).content, delay_s=4.0)
        return offline_reply(body)

    fake_llm.default = overloaded
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{"pipeline.task_retry_delays_seconds": [0.01], "memory.embedding_model": "hashing"},
    )
    assert settings.pipeline.task_retries == 3  # the default
    since = datetime.now(UTC)
    amaris = logging.getLogger("amaris")
    level = amaris.level
    amaris.setLevel(logging.INFO)  # as `amaris serve` logs by default (logging.level)
    try:
        with serve(settings) as client:
            score_step(client, 1, HACKED)
            assert client.post("/complete", json={}).json() == {"status": "complete"}
            done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 300}).json()
            assert done["status"] == "updated", done
            assert done["scopes"]["global"]["outcome"] == "published"
            logs, artifacts = asyncio.run(step_run_view("step-1", since))
    finally:
        fake_llm.default = offline_reply
        amaris.setLevel(level)
    calls = calls_by_agent(fake_llm)
    assert (calls["analyzer"], calls["updater"]) == (3 * len(HACKED), 2), calls
    # the scorer's rollouts, then 6 analyses + 1 summary + 1 query plan + 1 update
    # answered, 4 rubric canary calls; 13 requests timed out (the ledger's accounting)
    counted = f"({len(HACKED) + 26} requests, "
    failed = "; 13 failed, 13 of them timed out)"
    [line] = [log.message for log in logs if log.message.startswith("step 1: waited ")]
    assert counted in line and line.endswith(failed), line
    [usage] = [a for a in artifacts if a.key == "usage-step-1"]
    assert counted in str(usage.data) and failed in str(usage.data)
    assert "| analyzer | " in str(usage.data) and "| updater | " in str(usage.data)
