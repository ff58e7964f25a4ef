"""The ``amaris`` command, run as real processes on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from prefect.settings import PREFECT_API_URL

from amaris import RewardClient
from amaris.app.running import free_port
from tests.support.procs import amaris_process, run_amaris

pytestmark = pytest.mark.slow


def write_config(tmp_path: Path, **sections: object) -> Path:
    config = {"memory": {"path": str(tmp_path / "data")}, **sections}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def test_serve_scores_with_offline_judge_and_rubrics_cli(
    tmp_path: Path, prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    # The session's Prefect server, no repair worker: the server boots no Prefect server of
    # its own (it runs no step).
    monkeypatch.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
    config = write_config(
        tmp_path, server={"port": port}, prefect={"repair_interval_seconds": None}
    )
    url = f"http://127.0.0.1:{port}"
    with amaris_process(
        ["serve", "--config", str(config)], tmp_path, f"{url}/healthz", tmp_path / "serve.log"
    ):
        health = httpx.get(f"{url}/healthz").json()
        assert health["offline_judge"] is True
        async with RewardClient(url, timeout=10) as client:
            good = await client.score_async(
                {
                    "id": "r1",
                    "input": "What is 6 * 7?",
                    "output": "6 * 7 = 42. Answer: 42",
                    "supplemental_context": "Answer: 42",
                },
                {"current_step": 0, "high_level_goal": "math"},
            )
            bad = await client.score_async(
                {
                    "id": "r2",
                    "input": "What is 6 * 7?",
                    "output": "Answer: 41",
                    "supplemental_context": "Answer: 42",
                },
                {"current_step": 0},
            )
        assert (good, bad) == (1.0, 0.0)
        # the store is locked by the server: `rubrics show` goes through its API
        shown = run_amaris(["rubrics", "show", "--config", str(config)], tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert "rubric version 1" in shown.stdout
        assert "The response gives the correct final answer." in shown.stdout
        refused = run_amaris(["rubrics", "init", "--config", str(config)], tmp_path)
        assert refused.returncode == 1
        assert "stop the server" in refused.stderr
    log = (tmp_path / "serve.log").read_text()
    assert "OFFLINE rule-based judge" in log
    # stopped: the CLI opens the store itself
    reset = run_amaris(["rubrics", "init", "--config", str(config)], tmp_path)
    assert reset.returncode == 0, reset.stderr
    assert "rubric version 2 created" in reset.stdout
    shown = run_amaris(["rubrics", "show", "--config", str(config)], tmp_path)
    assert "rubric version 2 (origin config, parent 1" in shown.stdout
    assert (tmp_path / "data" / "rubrics.json").is_file()


def test_bad_config_stops_start_up_naming_the_key(tmp_path: Path) -> None:
    config = write_config(tmp_path, server={"prot": 1}, agents={"scorer": {"temperature": 9}})
    result = run_amaris(["serve", "--config", str(config)], tmp_path)
    assert result.returncode == 2
    assert "server.prot: unknown key" in result.stderr
    assert "agents.scorer.temperature" in result.stderr


def test_changed_anchors_stop_start_up(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    assert run_amaris(["rubrics", "show", "--config", str(config)], tmp_path).returncode == 0
    changed = write_config(tmp_path, anchor_rubrics=[{"text": "Other.", "weight": 1.0}])
    result = run_amaris(["serve", "--config", str(changed)], tmp_path)
    assert result.returncode == 2
    assert "anchors are immutable" in result.stderr


async def test_offline_llm_server_speaks_openai_with_faults(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["offline-llm", "--port", str(port), "--error-rate", "0.5", "--seed", "1"]
    with amaris_process(args, tmp_path, f"{url}/v1/models", tmp_path / "llm.log"):
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        data = (
            'Data:\n<<<AMARIS_DATA\n{"agent": "scorer", "criteria": [{"id": "A1", "text": '
            '"The response gives the correct final answer.", "kind": "requirement"}], '
            '"rollout": {"input": "2+2?", "output": "4", "supplemental_context": "4"}}\n'
            "AMARIS_DATA>>>"
        )
        outcomes = []
        for _ in range(20):
            try:
                reply = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": data}]
                )
                outcomes.append(reply.choices[0].message.content)
            except openai.InternalServerError:
                outcomes.append(None)
        await client.close()
    answered = [o for o in outcomes if o is not None]
    assert 3 <= len(answered) <= 17  # about half fail, by the seeded draw
    verdicts = [json.loads(o)["verdicts"] for o in answered]
    assert all([(v["id"], v["score"]) for v in vs] == [("A1", 4)] for vs in verdicts)
