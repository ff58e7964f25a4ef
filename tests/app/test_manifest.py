"""The run manifest: no secret in it, a stable config hash, what it records, the command
that shows it. (``amaris serve`` writing one, the step runs' artifact and ``amaris replay
--manifest``: tests/sim/test_sim_run.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from amaris.agents.prompts import load_prompts, prompt_fingerprint
from amaris.cli.main import main
from amaris.manifest import (
    build_manifest,
    config_hash,
    manifests,
    read_manifest,
    redacted_config,
    write_manifest,
)
from amaris.settings import AGENTS, Settings, load_settings
from tests.support.settings import make_settings

SECRETS = ("sk-PLANTED-client", "sk-PLANTED-scorer", "PLANTED-server", "PLANTED-body", "PLANTEDpw")


def _planted(tmp_path: Path) -> Settings:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(tmp_path / "data")},
                "client": {
                    "default": {
                        "api_key": SECRETS[0],
                        "base_url": f"https://user:{SECRETS[4]}@llm.example.com/v1?key={SECRETS[4]}",
                    },
                    "scorer": {"api_key": SECRETS[1], "base_url": "http://127.0.0.1:8000/v1"},
                },
                "server": {"api_key": SECRETS[2]},
                "agents": {"default": {"extra_body": {"x_api_key": SECRETS[3], "top_k": 5}}},
            }
        )
    )
    return load_settings(config)


class _Steps(BaseModel):
    """A run's own record, as a command gives it (its manifest's ``extra``)."""

    steps: int


def test_manifest_holds_no_secret(tmp_path: Path) -> None:
    settings = _planted(tmp_path)
    manifest = build_manifest(settings, load_prompts(settings.prompts), "serve", seed=7)
    path = write_manifest(manifest, settings.memory.path)
    text = path.read_text()
    assert "PLANTED" not in text  # grep the file for every planted secret
    assert sorted(manifest["secrets_removed"]) == [
        "agents.default.extra_body.x_api_key",
        "client.default.api_key",
        "client.scorer.api_key",
        "server.api_key",
    ]
    config = manifest["config"]
    assert config["client"]["default"]["base_url"] == "https://llm.example.com/v1"
    assert config["agents"]["default"]["extra_body"] == {"top_k": 5}
    assert re.fullmatch(r"manifest-\d{8}T\d{6}\d+Z-serve\.json", path.name)
    assert manifests(settings.memory.path) == [path]


def test_config_hash_is_stable_and_changes_with_the_config_not_the_secrets(
    tmp_path: Path,
) -> None:
    settings = _planted(tmp_path)
    first = build_manifest(settings, {}, "serve")
    second = build_manifest(settings, {}, "serve")
    assert first["config_hash"] == second["config_hash"]
    assert first["config_hash"] == config_hash(json.loads(json.dumps(first["config"])))
    other_key = settings.model_copy(
        update={"server": settings.server.model_copy(update={"api_key": None})}
    )
    assert build_manifest(other_key, {}, "serve")["config_hash"] == first["config_hash"]
    other_port = settings.model_copy(
        update={"server": settings.server.model_copy(update={"port": 9999})}
    )
    assert build_manifest(other_port, {}, "serve")["config_hash"] != first["config_hash"]


def test_the_redacted_config_loads_back_to_the_same_config(tmp_path: Path) -> None:
    settings = _planted(tmp_path)
    config, _ = redacted_config(settings)
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(config))
    loaded = redacted_config(load_settings(again))[0]
    assert loaded == config
    # The same JSON too (replay compares hashes): a float setting's default written as an
    # int (20, not 20.0) compares equal but hashes otherwise once loaded back.
    assert config_hash(loaded) == config_hash(config)


def test_manifest_records_agents_versions_commit_and_seed(tmp_path: Path) -> None:
    settings = _planted(tmp_path)
    prompts = load_prompts(settings.prompts)
    manifest = build_manifest(settings, prompts, "simulate", seed=3, extra=_Steps(steps=2))
    agents = manifest["agents"]
    assert set(agents) == set(AGENTS)
    assert agents["scorer"]["endpoint"] == "local"
    assert agents["updater"]["endpoint"] == "hosted"
    assert agents["updater"]["base_url"] == "https://llm.example.com/v1"
    options = settings.agents.for_agent("analyzer")
    # the fingerprint the pipeline's cache keys use
    assert agents["analyzer"]["prompt_fingerprint"] == prompt_fingerprint(
        prompts["analyzer"], options.model, options.temperature
    )
    assert Settings().agents.for_agent("scorer").model == agents["scorer"]["model"]
    assert build_manifest(Settings(), prompts, "serve")["agents"]["scorer"]["endpoint"] == "offline"
    versions = manifest["versions"]
    assert set(versions) >= {"amaris", "prefect", "qdrant-client", "openai", "pydantic"}
    assert versions["amaris"] and versions["prefect"] and versions["pydantic"]
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", manifest["git_commit"] or "")
    assert (manifest["seed"], manifest["extra"], manifest["kind"]) == (3, {"steps": 2}, "simulate")


def test_command_shows_the_newest_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = _planted(tmp_path)
    data = settings.memory.path
    assert main(["manifest", "--data", str(data)]) == 1
    assert "no run manifest" in capsys.readouterr().err
    older = build_manifest(settings, {}, "serve", seed=1)
    newer = build_manifest(settings, {}, "simulate", seed=2)
    write_manifest(older, data)
    write_manifest(newer, data)
    assert main(["manifest", "--data", str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == newer
    assert main(["manifest", "--data", str(data)]) == 0
    shown = capsys.readouterr().out
    assert newer["run_id"] in shown and newer["config_hash"] in shown
    assert main(["manifest", "--data", str(data), "--list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert read_manifest(manifests(data)[-1]) == newer


def test_file_names_sort_by_start_whatever_the_kind(tmp_path: Path) -> None:
    settings = _planted(tmp_path)
    data = settings.memory.path
    # a kind with a dash (simulate-ablation) names the file after its whole kind
    first = write_manifest(build_manifest(settings, {}, "simulate-ablation"), data)
    second = write_manifest(build_manifest(settings, {}, "serve"), data)
    stamp = re.compile(r"manifest-\d{8}T\d{12}Z-(simulate-ablation|serve)\.json")
    assert stamp.fullmatch(first.name) and stamp.fullmatch(second.name)
    assert manifests(data) == [first, second]


def test_the_judges_that_ask_with_the_scorer_prompt_record_its_fingerprint(
    tmp_path: Path,
) -> None:
    settings = make_settings(
        tmp_path,
        **{"agents.auditor.model": "audit-model", "agents.cheap_scorer.model": "cheap-model"},
    )
    prompts = load_prompts(settings.prompts)
    agents = build_manifest(settings, prompts, "serve")["agents"]
    for judge, model in (("auditor", "audit-model"), ("cheap_scorer", "cheap-model")):
        options = settings.agents.for_agent(judge)
        assert options.model == model
        assert agents[judge]["prompt_fingerprint"] == prompt_fingerprint(
            prompts["scorer"], model, options.temperature
        )
