"""Settings from the environment: ``AMARIS_<SECTION>__<KEY>``, its precedence, errors that
name the variable, and API keys that nothing shows."""

from __future__ import annotations

import logging
import secrets
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import Request, Response

from amaris.settings import AGENTS, ConfigError, Settings, load_settings, secret_value
from amaris.sim.judge_server import create_llm_app
from tests.support.app import serve
from tests.support.fake_llm import Reply, offline_reply, serve_in_thread
from tests.support.pipeline_helpers import metadata, rollout


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def serve_the_other_agents_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scorer alone has an endpoint: the other agents are served offline, by choice."""
    for agent in AGENTS:
        if agent != "scorer":
            monkeypatch.setenv(f"AMARIS_CLIENT__{agent.upper()}__OFFLINE", "true")


def test_a_scalar_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMARIS_SERVER__PORT", "9100")
    monkeypatch.setenv("amaris_gateway__reask_on_invalid", "false")  # any case
    settings = load_settings(None)
    assert settings.server.port == 9100
    assert settings.gateway.reask_on_invalid is False
    assert Settings().server.port == 9100  # pydantic-settings' own constructor agrees


def test_nested_agent_keys_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path, "agents: {scorer: {temperature: 0.5}, analyzer: {model: a1}}")
    monkeypatch.setenv("AMARIS_AGENTS__SCORER__MODEL", "judge-7b")
    monkeypatch.setenv("AMARIS_CLIENT__SCORER__BASE_URL", "http://judge.example/v1")
    serve_the_other_agents_offline(monkeypatch)
    monkeypatch.setenv("AMARIS_CONCURRENCY__SCORER", "3")
    settings = load_settings(config)
    scorer = settings.agent_options("scorer")
    # merged key by key with the file's agents.scorer: both keys hold
    assert (scorer.model, scorer.temperature) == ("judge-7b", 0.5)
    assert settings.agent_options("analyzer").model == "a1"
    assert settings.client.for_agent("scorer").base_url == "http://judge.example/v1"
    assert settings.client.for_agent("analyzer").base_url is None
    assert settings.concurrency.scorer == 3


def test_lists_mappings_and_null_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMARIS_PIPELINE__TASK_RETRY_DELAYS_SECONDS", "[2, 4.5]")
    monkeypatch.setenv("AMARIS_AGENTS__DEFAULT__EXTRA_BODY", '{"top_k": 20}')
    monkeypatch.setenv("AMARIS_PRICING", '{"Qwen/Qwen3-8B": {"prompt": 0.1, "completion": 0.4}}')
    monkeypatch.setenv("AMARIS_ANCHOR_RUBRICS", '[{"text": "It is right.", "weight": 2}]')
    monkeypatch.setenv("AMARIS_MEMORY__ROLLOUT_RETENTION_STEPS", "null")
    monkeypatch.setenv("AMARIS_SCORING__ON_FAILURE", "null")
    settings = load_settings(None)
    assert settings.pipeline.task_retry_delays_seconds == [2.0, 4.5]
    extra_body = settings.agent_options("updater").extra_body
    assert extra_body is not None and extra_body.root == {"top_k": 20}
    assert settings.pricing["Qwen/Qwen3-8B"].completion == 0.4
    assert [(r.text, r.weight) for r in settings.anchor_rubrics] == [("It is right.", 2.0)]
    assert settings.memory.rollout_retention_steps is None
    assert settings.scoring.on_failure == "null"


def test_precedence_defaults_file_environment_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path, "server: {port: 9000, host: 0.0.0.0, allowed_hosts: [gpu-7]}")
    assert load_settings(None).server.port == 8002
    assert load_settings(config).server.port == 9000
    monkeypatch.setenv("AMARIS_SERVER__PORT", "9100")
    settings = load_settings(config)
    assert (settings.server.port, settings.server.host) == (9100, "0.0.0.0")
    assert load_settings(config, **{"server.port": 9200}).server.port == 9200


def test_the_older_key_variables_fill_in_only_what_no_layer_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    monkeypatch.setenv("AMARIS_API_KEY", "srv-fallback")
    settings = load_settings(None)
    assert secret_value(settings.client.default.api_key) == "sk-fallback"
    assert secret_value(settings.server.api_key) == "srv-fallback"
    monkeypatch.setenv("AMARIS_CLIENT__DEFAULT__API_KEY", "sk-variable")
    monkeypatch.setenv("AMARIS_SERVER__API_KEY", "srv-variable")
    config = write(tmp_path, "server: {api_key: srv-file}")
    settings = load_settings(config)
    assert secret_value(settings.client.default.api_key) == "sk-variable"
    assert secret_value(settings.server.api_key) == "srv-variable"


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        ("AMARIS_SERVER__PORT", "eighty", "server.port (AMARIS_SERVER__PORT): Input should be"),
        ("AMARIS_SERVER__PROT", "9000", "server.prot (AMARIS_SERVER__PROT): unknown key"),
        ("AMARIS_AGENTS__CRITIC__MODEL", "x", "agents.critic (AMARIS_AGENTS__CRITIC__MODEL)"),
        (
            "AMARIS_CLIENT__SCORER__MAX_CONCURRENCY",
            "-1",
            "client.scorer.max_concurrency (AMARIS_CLIENT__SCORER__MAX_CONCURRENCY)",
        ),
        (
            "AMARIS_AGENTS__DEFAULT__SAMPLES",
            "2",
            "agents (AMARIS_AGENTS__DEFAULT__SAMPLES): Value error, agents.default.samples",
        ),
        (
            "AMARIS_PIPELINE__TASK_RETRY_DELAYS_SECONDS",
            "[1,",
            "environment: AMARIS_PIPELINE__TASK_RETRY_DELAYS_SECONDS: not valid JSON",
        ),
    ],
)
def test_a_bad_environment_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, named: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings(None)
    assert named in str(info.value)


def test_variables_that_are_not_settings_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AMARIS_CONFIG", "AMARIS_URL", "AMARIS_REPAIR_URL", "AMARIS_STEP"):
        monkeypatch.setenv(name, "/somewhere")
    assert load_settings(None).server.port == 8002


# -- secrets ------------------------------------------------------------------------------


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A server key and a judge key, set the two ways an operator sets them."""
    server_key, judge_key = f"srv-{secrets.token_hex(12)}", f"judge-{secrets.token_hex(12)}"
    monkeypatch.setenv("AMARIS_SERVER__API_KEY", server_key)
    monkeypatch.setenv("AMARIS_CLIENT__SCORER__API_KEY", judge_key)
    serve_the_other_agents_offline(monkeypatch)
    return server_key, judge_key


def test_no_repr_dump_or_error_shows_an_api_key(tmp_path: Path, keys: tuple[str, str]) -> None:
    settings = load_settings(write(tmp_path, "client: {default: {api_key: sk-in-the-file}}"))
    assert secret_value(settings.server.api_key) == keys[0]
    assert secret_value(settings.client.for_agent("scorer").api_key) == keys[1]
    shown = [
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        str(settings.model_dump()),
        repr(settings.client.for_agent("scorer")),
    ]
    # A key written under a misspelt name, or an error of the whole configuration:
    # pydantic's own error quotes the input; the ConfigError carries none of it, in its
    # message or its traceback.
    misspelt = write(tmp_path, "client: {default: {apikey: sk-misspelt}}")
    with pytest.raises(ConfigError) as info:
        load_settings(misspelt)
    assert "client.default.apikey: unknown key" in str(info.value)
    shown.append("".join(traceback.format_exception(info.value)))
    bad = write(
        tmp_path,
        "client: {default: {api_key: sk-in-the-file}}\nanchor_rubrics: [{text: a, weight: -1}]",
    )
    with pytest.raises(ConfigError) as info:
        load_settings(bad)
    assert "at least one criterion needs a positive weight" in str(info.value)
    shown.append("".join(traceback.format_exception(info.value)))
    for secret in (*keys, "sk-in-the-file", "sk-misspelt"):
        assert not [text for text in shown if secret in text], secret


@pytest.fixture
def judge(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """An OpenAI-compatible judge that records the Authorization header of each call."""
    seen: list[str] = []

    async def respond(body: dict[str, Any]) -> Reply:
        return offline_reply(body)

    app = create_llm_app(respond)

    @app.middleware("http")
    async def record(request: Request, call_next: Callable[[Request], Any]) -> Response:
        seen.append(request.headers.get("authorization", ""))
        response: Response = await call_next(request)
        return response

    with serve_in_thread(app) as url:
        yield f"{url}/v1", seen


def test_keys_from_the_environment_work_and_no_log_or_health_shows_them(
    tmp_path: Path,
    keys: tuple[str, str],
    judge: tuple[str, list[str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server_key, judge_key = keys
    url, authorizations = judge
    settings = load_settings(
        None,
        **{
            "memory.path": str(tmp_path / "data"),
            "memory.embedding_model": "hashing",
            "client.scorer.base_url": url,
        },
    )
    for name in ("amaris", "api"):
        caplog.set_level(logging.DEBUG, logger=name)
    with serve(settings) as client:
        body = {"rollout": rollout(1, 0, "correct"), "metadata": metadata(1)}
        assert client.post("/score", json=body).status_code == 401
        scored = client.post("/score", json=body, headers={"Authorization": f"Bearer {server_key}"})
        assert scored.json()["status"] == "scored", scored.text
        health = client.get("/healthz")
    # the judge key went where it belongs: the judge's Authorization header
    assert authorizations and set(authorizations) == {f"Bearer {judge_key}"}
    shown = [health.text, scored.text, *(r.getMessage() for r in caplog.records)]
    shown += [p.read_text(errors="replace") for p in settings.memory.path.rglob("*.jsonl")]
    assert any("llm_calls" in p.name for p in settings.memory.path.rglob("*.jsonl"))
    for secret in keys:
        assert not [text for text in shown if secret in text], secret
