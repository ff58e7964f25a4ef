"""``amaris check-judge`` against the offline judge and a test-owned OpenAI-compatible
server (real uvicorn): a table, exit 0 when every agent works, non-zero naming the agent
and the failure otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from amaris.app.running import free_port
from amaris.cli.main import main
from amaris.sim.judge_server import Reply
from tests.support.fake_llm import FakeLLM


def run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any]
) -> tuple[int, str]:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {"memory": {"path": str(tmp_path / "data"), "embedding_model": "hashing"}, **config}
        )
    )
    code = main(["check-judge", "--config", str(path)])
    return code, capsys.readouterr().out


def row(out: str, agent: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(agent + " "))


def endpoint(fake: FakeLLM, **agents: Any) -> dict[str, Any]:
    return {
        "client": {"default": {"base_url": fake.url, "api_key": "test-key"}},
        "agents": {"default": {"model": "small-judge", "timeout": 5}, **agents},
        "gateway": {"max_attempts": 1},
    }


def test_default_config_reports_the_offline_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(tmp_path, capsys, {})
    assert code == 0, out
    assert "offline (rule-based, NOT an LLM)" in row(out, "scorer")
    assert "verdict parsed" in row(out, "scorer")
    assert "all agents OK" in out
    assert not (tmp_path / "data").exists()  # a probe writes nothing


def test_a_working_endpoint_gives_a_table_and_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_llm: FakeLLM
) -> None:
    fake_llm.models = [{"id": "small-judge", "object": "model", "max_model_len": 8192}]
    code, out = run(tmp_path, capsys, endpoint(fake_llm, updater={"context_window": 4096}))
    assert code == 0, out
    for agent in ("scorer", "analyzer", "summarizer", "meta_summarizer", "query_generator"):
        cells = row(out, agent)
        assert fake_llm.url in cells and "small-judge" in cells
        assert "json_schema" in cells and "8192 (max_model_len)" in cells
        assert "verdict parsed (reward 1.00)" in cells
    assert "4096 (configured)" in row(out, "updater")
    # Two probes: the updater's options differ from the others'. Each asked for a schema.
    chats = fake_llm.requests
    assert len(chats) == 2
    assert all(c["response_format"]["type"] == "json_schema" for c in chats)
    assert "all agents OK" in out


def test_the_mode_that_works_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_llm: FakeLLM
) -> None:
    fake_llm.models = [{"id": "small-judge", "object": "model"}]
    fake_llm.refuse_formats = {"json_schema"}
    code, out = run(tmp_path, capsys, endpoint(fake_llm))
    assert code == 0, out
    assert "json_object (fallback)" in row(out, "scorer")
    assert "unknown" in row(out, "scorer")  # listed without max_model_len


def test_an_unreachable_endpoint_exits_non_zero_naming_the_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_llm: FakeLLM
) -> None:
    fake_llm.models = [{"id": "small-judge", "object": "model"}]
    config = endpoint(fake_llm)
    down = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    config["client"]["analyzer"] = {"base_url": down}
    code, out = run(tmp_path, capsys, config)
    assert code == 1, out
    assert "no" in row(out, "analyzer").split()
    failures = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(failures) == 1
    assert failures[0].startswith("FAIL analyzer: ") and "unreachable" in failures[0]
    assert down in failures[0]
    assert "verdict parsed" in row(out, "scorer")


def test_an_unlisted_model_and_an_unscored_sample_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_llm: FakeLLM
) -> None:
    # The endpoint serves other models, and its answers are not verdicts.
    fake_llm.models = [{"id": "other-model", "object": "model"}]
    config = endpoint(fake_llm, scorer={"model": "missing-model"})
    fake_llm.push(*[Reply(content="I think it is fine.")] * 2)
    code, out = run(tmp_path, capsys, config)
    assert code == 1, out
    failures = [line for line in out.splitlines() if line.startswith("FAIL scorer: ")]
    assert any("'missing-model' is not listed" in f for f in failures), out
    assert any("the sample was not scored: judge_invalid" in f for f in failures), out
    assert any(
        line.startswith("FAIL analyzer: model 'small-judge' is not listed")
        for line in out.splitlines()
    ), out
