"""Repair: a step fails while the judge is down; the repair completes it later without
repeating the LLM calls that had succeeded. And the schedule, on a real Prefect server."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from amaris.app.prefect_server import AUTH_FILE
from amaris.app.running import free_port
from amaris.app.wiring import create_app
from amaris.sim.judge_server import Reply
from tests.support.agents import HACKED, agent_of, calls_by_agent
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.pipeline_helpers import metadata, rollout
from tests.support.procs import amaris_process
from tests.support.settings import llm_settings


@pytest.mark.usefixtures("prefect_harness")
def test_repair_completes_a_failed_step_reusing_work(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.repair import repair_steps

    def judge_down_for_updates(body: dict[str, Any]) -> Reply:
        return Reply(status=503) if agent_of(body) == "updater" else offline_reply(body)

    fake_llm.default = judge_down_for_updates
    settings = llm_settings(
        tmp_path, fake_llm, **{"pipeline.task_retries": 0, "memory.embedding_model": "hashing"}
    )
    try:
        with serve_in_thread(create_app(settings, qdrant_location=":memory:")) as url:
            items = [
                {"rollout": rollout(3, i, b), "metadata": metadata(3)} for i, b in enumerate(HACKED)
            ]
            assert httpx.post(f"{url}/batch_score", json={"items": items}).status_code == 200
            httpx.post(f"{url}/complete", json={})
            failed = httpx.get(
                f"{url}/rubric_status/wait", params={"step": 3, "timeout": 60}, timeout=90
            ).json()
            assert failed["status"] == "failed"
            assert httpx.get(f"{url}/steps", params={"status": "failed"}).json() == [
                {"step": 3, "status": "failed", "rubric": None}
            ]
            # A web page's form (an empty body, a form type) re-runs nothing: 415.
            form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": "null"}
            refused = httpx.post(f"{url}/steps/3/rerun", content=b"", headers=form)
            assert refused.status_code == 415
            assert httpx.get(f"{url}/steps").json() == [
                {"step": 3, "status": "failed", "rubric": None}
            ]
            # the judge comes back; nothing else to repair is found twice
            fake_llm.default = offline_reply
            fake_llm.requests.clear()
            monkeypatch.setenv("AMARIS_REPAIR_URL", url)  # as `amaris serve` sets it
            assert asyncio.run(repair_steps()) == {3: "updated"}
            # and the rubric canary on the candidate (never cached): the sure prompt's
            # reference (2 calls), its failing rollout and the phrase probe (1 each)
            assert calls_by_agent(fake_llm) == {"updater": 1, "scorer": 4}
            assert httpx.get(f"{url}/steps").json() == [
                {"step": 3, "status": "done", "rubric": "updated"}
            ]
            assert httpx.get(f"{url}/rubrics").json()["version"] == 2
            assert asyncio.run(repair_steps()) == {}
            assert httpx.post(f"{url}/steps/99/rerun", json={}).status_code == 404
            assert httpx.post(f"{url}/steps/3/rerun", json={}).json() == {
                "step": 3,
                "status": "done",
            }
    finally:
        fake_llm.default = offline_reply


@pytest.mark.usefixtures("prefect_harness")
def test_rerun_asks_only_for_the_analyses_a_failed_chunk_lacked(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # One rollout's analysis fails (judge 503) in a chunk of four: the chunk task fails,
    # its three finished analyses are kept, and the re-run asks for the fourth only.
    unlucky = rollout(4, 2, HACKED[2])["id"]

    def down_for_one(body: dict[str, Any]) -> Reply:
        if agent_of(body) == "analyzer" and unlucky in body["messages"][-1]["content"]:
            return Reply(status=503)
        return offline_reply(body)

    fake_llm.default = down_for_one
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "pipeline.task_retries": 0,
            "pipeline.chunk_size": 4,
            "memory.embedding_model": "hashing",
        },
    )
    try:
        with serve_in_thread(create_app(settings, qdrant_location=":memory:")) as url:
            items = [
                {"rollout": rollout(4, i, b), "metadata": metadata(4)} for i, b in enumerate(HACKED)
            ]
            assert httpx.post(f"{url}/batch_score", json={"items": items}).status_code == 200
            fake_llm.requests.clear()
            httpx.post(f"{url}/complete", json={})
            failed = httpx.get(
                f"{url}/rubric_status/wait", params={"step": 4, "timeout": 60}, timeout=90
            ).json()
            assert failed["status"] == "failed"
            # (the chunks that succeeded may have been summarised meanwhile)
            assert calls_by_agent(fake_llm)["analyzer"] == len(HACKED)
            fake_llm.default = offline_reply
            fake_llm.requests.clear()
            assert httpx.post(f"{url}/steps/4/rerun", json={}).json() == {
                "step": 4,
                "status": "started",
            }
            done = httpx.get(
                f"{url}/rubric_status/wait", params={"step": 4, "timeout": 60}, timeout=90
            ).json()
            assert done["status"] == "updated", done
            calls = calls_by_agent(fake_llm)
            assert calls["analyzer"] == 1
            assert unlucky in fake_llm.requests[0]["messages"][-1]["content"]
            # the per-rollout files of the failed chunk served; once done they are gone
            assert list((settings.memory.path / "pipeline-cache").glob("*.json")) == []
    finally:
        fake_llm.default = offline_reply


@pytest.mark.slow
def test_serve_schedules_the_repair_on_its_prefect_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The repair worker (a Prefect runner, inheriting this environment) looks for due runs
    # every second, not Prefect's default 10.
    monkeypatch.setenv("PREFECT_RUNNER_POLL_FREQUENCY", "1")
    port, prefect_port = free_port(), free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(tmp_path / "data"), "embedding_model": "hashing"},
                "server": {"port": port},
                "prefect": {"port": prefect_port, "repair_interval_seconds": 10},
            }
        )
    )
    env_url = f"http://127.0.0.1:{prefect_port}/api"
    # Other tests of this session may have run the repair on the same Prefect home: only
    # runs started by this amaris count.
    since = datetime.now(UTC).isoformat()
    with amaris_process(
        ["serve", "--config", str(config)],
        tmp_path,
        f"http://127.0.0.1:{port}/healthz",
        tmp_path / "serve.log",
    ):
        home = Path(os.environ.get("PREFECT_HOME") or tmp_path / "data" / "prefect")
        secret = (home / AUTH_FILE).read_text().strip()
        auth = httpx.BasicAuth(*secret.split(":", 1))  # Prefect's auth string is user:pass
        deadline = time.monotonic() + 120
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            try:
                found = httpx.post(
                    f"{env_url}/flow_runs/filter",
                    json={
                        "flows": {"name": {"any_": ["amaris-repair"]}},
                        "flow_runs": {
                            "state": {"type": {"any_": ["COMPLETED"]}},
                            "start_time": {"after_": since},
                        },
                        "limit": 10,
                        "sort": "START_TIME_DESC",
                    },
                    auth=auth,
                    timeout=5,
                )
                runs = found.json() if found.status_code == 200 else []
            except httpx.HTTPError:
                runs = []
            if runs:
                break
            time.sleep(1)
        assert runs, "no scheduled repair run completed"
        deployment = httpx.get(
            f"{env_url}/deployments/name/amaris-repair/scheduled-repair", auth=auth, timeout=5
        ).json()
        schedules = deployment["schedules"]
        assert schedules[0]["schedule"]["interval"] == 10.0
        assert deployment["parameters"] == {}  # the service's address is no parameter
    # the Prefect server and the repair worker stopped with amaris
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{env_url}/health", timeout=2)
