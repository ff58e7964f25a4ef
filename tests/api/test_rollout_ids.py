"""A rollout id is one rollout per step: another content under it is a 409, a retry is not.

Otherwise a second rollout under a logged id would be kept too, and the step's analyses
(stored and shown by id) attached to the wrong record.
"""

from __future__ import annotations

import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import httpx
import pytest

from amaris.app.wiring import create_app
from amaris.memory.records import RolloutRecord
from amaris.models import Rollout
from amaris.offline.judge import respond
from amaris.scoring.rollout_ids import RolloutConflictError, RolloutIds
from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app, serve
from tests.support.fake_llm import FakeLLM, serve_in_thread
from tests.support.rollout_logs import KINDS, memory_log
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient


def body(step: int = 1, **rollout: Any) -> dict[str, Any]:
    fields = {
        "id": "r1",
        "input": "What is 2+2?",
        "output": "4",
        "supplemental_context": "4",
        **rollout,
    }
    return {"rollout": fields, "metadata": {"current_step": step}}


def outputs(client: TestClient, step: int) -> list[str]:
    records = client.app.state.services.rollouts.load_step(step)  # type: ignore[attr-defined]
    return [record.rollout.output for record in records]


@pytest.mark.parametrize(
    "change",
    [
        {"output": "5"},
        {"input": "What is 3+1?"},
        {"supplemental_context": "5"},
        {"group_id": "g2"},
        {"metadata": {"sample": 2}},
    ],
    ids=["output", "input", "context", "group_id", "metadata"],
)
def test_another_rollout_under_a_logged_id_is_409_and_changes_nothing(
    tmp_path: Path, fake_llm: FakeLLM, change: dict[str, Any]
) -> None:
    with serve(llm_settings(tmp_path, fake_llm)) as client:
        assert client.post("/score", json=body(metadata={"sample": 1})).status_code == 200
        counters = client.get("/healthz").json()["counters"]
        r = client.post("/score", json=body(**{"metadata": {"sample": 1}, **change}))
        assert r.status_code == 409, r.text
        assert r.json()["error"] == "conflict"
        [detail] = r.json()["detail"]
        assert detail["field"] == "rollout.id"
        assert detail["message"].startswith("rollout id 'r1' is already in step 1 with different")
        assert outputs(client, 1) == ["4"]
        assert client.get("/healthz").json()["counters"] == counters
    assert len(fake_llm.requests) == 1


def test_a_retry_is_scored_again_and_an_id_is_per_step(offline_client: TestClient) -> None:
    first = offline_client.post("/score", json=body())
    again = offline_client.post("/score", json=body(metadata=None))  # null is the default
    # The training metadata is the trainer's, not the rollout's: not part of the content.
    later = offline_client.post(
        "/score", json={**body(), "metadata": {"current_step": 1, "other_context": "retried"}}
    )
    other_step = offline_client.post("/score", json=body(step=2, output="5"))
    assert [r.status_code for r in (first, again, later, other_step)] == [200] * 4
    assert again.json()["score"] == first.json()["score"]
    assert again.json()["cached"] is True
    # Logged again, as every request is; the step's analysis keeps one record per id.
    assert outputs(offline_client, 1) == ["4", "4", "4"]
    assert outputs(offline_client, 2) == ["5"]


def test_an_unscored_rollout_sent_again_is_judged_again(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(status=500))
    settings = llm_settings(
        tmp_path, fake_llm, **{"gateway.max_attempts": 1, "scoring.on_failure": "error"}
    )
    with serve(settings) as client:
        assert client.post("/score", json=body()).status_code == 503
        retry = client.post("/score", json=body())
        assert (retry.status_code, retry.json()["status"]) == (200, "scored")
        records = client.app.state.services.rollouts.load_step(1)  # type: ignore[attr-defined]
        assert [r.status for r in records] == ["unscored", "scored"]


def test_a_batch_item_reusing_an_id_with_other_content_is_invalid(
    offline_client: TestClient,
) -> None:
    items = [body(), body(output="5"), body(), body(id="r2", output="5")]
    r = offline_client.post("/batch_score", json={"items": items})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["scored", "invalid", "scored", "scored"]
    assert results[1]["rollout_id"] == "r1"
    assert results[1]["reason"].startswith("items[1].rollout.id: rollout id 'r1' is already in")
    assert sorted(outputs(offline_client, 1)) == ["4", "4", "5"]
    records = offline_client.app.state.services.rollouts.load_step(1)  # type: ignore[attr-defined]
    assert sorted((r.rollout.id, r.rollout.output) for r in records) == [
        ("r1", "4"),
        ("r1", "4"),
        ("r2", "5"),
    ]


def test_concurrent_requests_with_one_id_let_one_content_in(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # The first judge call is held until the others are answered: they must be decided
    # while it is being judged, before anything of it is stored. (Were two let through,
    # the second judge call would wait behind the held one and the 409s never come.)
    entered, release = threading.Event(), threading.Event()

    def held(request: dict[str, Any]) -> Reply:
        entered.set()
        release.wait(60)
        return Reply(content=respond(request["messages"]))

    fake_llm.push(held)
    app = in_memory_app(llm_settings(tmp_path, fake_llm))
    contents = [str(n) for n in range(4, 10)]
    with serve_in_thread(app) as url, ThreadPoolExecutor(len(contents)) as pool:

        def post(output: str) -> httpx.Response:
            return httpx.post(f"{url}/score", json=body(output=output), timeout=60)

        futures = {pool.submit(post, output): output for output in contents}
        try:
            assert entered.wait(60)
            answered = as_completed(futures, timeout=60)
            early = [next(answered).result() for _ in contents[1:]]
        finally:
            release.set()
        assert [r.status_code for r in early] == [409] * len(early), [r.text for r in early]
        [winner] = [f for f in futures if f.result(timeout=60).status_code == 200]
        records = app.state.services.rollouts.load_step(1)
        assert [r.rollout.output for r in records] == [futures[winner]]
    assert len(fake_llm.requests) == 1


def test_ids_are_checked_against_the_log_after_a_restart(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        assert client.post("/score", json=body()).status_code == 200
    with TestClient(create_app(settings)) as client:
        assert client.post("/score", json=body(output="5")).status_code == 409
        assert client.post("/score", json=body()).status_code == 200


def test_ids_in_log_lines_are_escaped_and_bounded(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    forged = "r1\n2030-01-01 ERROR amaris forged line\u2028\x85" + "x" * 450
    fake_llm.push(Reply(status=500))
    settings = llm_settings(tmp_path, fake_llm, **{"gateway.max_attempts": 1})
    caplog.set_level(logging.INFO)
    with serve(settings) as client:
        assert client.post("/score", json=body(id=forged)).json()["status"] == "unscored"
        assert client.post("/score", json=body(id=forged, output="5")).status_code == 409
        items = [body(id=forged, output=7), body(id=forged, output="6")]
        assert [
            x["status"]
            for x in client.post("/batch_score", json={"items": items}).json()["results"]
        ] == ["invalid", "invalid"]
    mine = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(("amaris", "api")) and "forged" in r.getMessage()
    ]
    assert len(mine) == 3, mine  # unscored, the 409, the batch's conflicting item
    for message in mine:
        assert not any(sep in message for sep in ("\n", "\r", "\u2028", "\x85")), message
        assert re.search(r"'r1\\+n2030-01-01 ERROR amaris forged line\\+u2028\\+x85x", message)
        assert len(message) < 1000
        assert "x" * 200 not in message


@pytest.mark.parametrize("kind", KINDS)
async def test_an_id_given_back_unstored_is_free_and_evicted_steps_reload(kind: str) -> None:
    log = memory_log(kind)
    ids = RolloutIds(log, steps_kept=2)
    first = Rollout(id="r1", input="q", output="4")
    other = first.model_copy(update={"output": "5"})
    # A request that failed before its record was stored (a 429, say) holds nothing.
    ids.release(await ids.claim(1, first), stored=False)
    held = await ids.claim(1, other)
    with pytest.raises(RolloutConflictError):
        await ids.claim(1, first)
    log.append(1, RolloutRecord.model_validate({"rollout": other.model_dump(mode="json")}))
    ids.release(held, stored=True)
    # Steps 2 and 3 push step 1 out; its ids come back from the log.
    for step in (2, 3):
        ids.release(await ids.claim(step, first), stored=False)
    with pytest.raises(RolloutConflictError):
        await ids.claim(1, first)
    ids.release(await ids.claim(1, other), stored=True)
