"""The agents are one ``Literal`` and the sections keyed by them one shape: every agent is
reached the same way in ``client``, ``agents``, ``concurrency`` and ``prompts``, from the
file and from the environment, and a name that is no agent is an error naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from amaris.settings import (
    AGENTS,
    AUDITOR,
    CHEAP_SCORER,
    AgentName,
    AgentsSettings,
    ClientSettings,
    ConcurrencySettings,
    ConfigError,
    MethodAgent,
    PerAgent,
    PromptsSettings,
    load_settings,
)

SECTIONS: list[tuple[str, type[BaseModel], list[str], list[str]]] = [
    ("client", ClientSettings, ["default"], [AUDITOR, CHEAP_SCORER]),
    ("agents", AgentsSettings, ["default"], [AUDITOR, CHEAP_SCORER]),
    ("concurrency", ConcurrencySettings, ["total"], [AUDITOR, CHEAP_SCORER]),
    ("prompts", PromptsSettings, [], []),
]
"""Each per-agent section: its key, its model, the keys before the agents', the keys after
them (the auditor and the cheap scorer: they read the scorer's prompt, so ``prompts`` has
none)."""

ENTRY = {
    "client": ("{offline: true}", "OFFLINE", "true"),
    "agents": ("{model: m-AGENT}", "MODEL", "m-AGENT"),
    "concurrency": ("7", None, "7"),
    "prompts": ("/prompts/AGENT.txt", None, "/prompts/AGENT.txt"),
}
"""Per section: an entry in YAML, the key an environment variable sets in it (None: the
entry is a scalar), and that variable's value."""


def test_the_agents_are_one_literal_and_one_shape() -> None:
    assert get_args(MethodAgent) == AGENTS
    assert get_args(AgentName) == (*AGENTS, AUDITOR, CHEAP_SCORER)
    assert tuple(PerAgent.model_fields) == AGENTS
    for _, model, head, tail in SECTIONS:
        assert issubclass(model, PerAgent)
        # the head key first, as config.yaml writes it and every dump lists it
        assert list(model.model_fields) == [*head, *AGENTS, *tail]


def _entry(settings_section: PerAgent[object], agent: AgentName) -> object:
    value = settings_section.get(agent)
    assert value is not None
    return value


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("section", [s for s, _, _, _ in SECTIONS])
def test_each_agent_is_reached_from_the_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str, agent: AgentName
) -> None:
    yaml_entry, env_key, env_value = ENTRY[section]
    config = tmp_path / "config.yaml"
    config.write_text(f"{section}: {{{agent}: {yaml_entry.replace('AGENT', agent)}}}")
    from_file = load_settings(config)
    variable = f"AMARIS_{section.upper()}__{agent.upper()}" + (f"__{env_key}" if env_key else "")
    monkeypatch.setenv(variable, env_value.replace("AGENT", agent))
    from_environment = load_settings(None)
    for settings in (from_file, from_environment):
        entry = _entry(getattr(settings, section), agent)
        assert entry == _entry(getattr(from_file, section), agent)
        others = [a for a in AGENTS if a != agent]
        assert all(getattr(settings, section).get(a) is None for a in others)
    if section == "agents":
        assert from_environment.agent_options(agent).model == f"m-{agent}"
    if section == "client":
        assert from_environment.client.offline_agents() == list(AGENTS)


@pytest.mark.parametrize("section", [s for s, _, _, _ in SECTIONS])
def test_a_name_that_is_no_agent_is_an_unknown_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"{section}: {{judge: {{}}}}")
    with pytest.raises(ConfigError) as error:
        load_settings(config)
    assert f"  {section}.judge: unknown key" in str(error.value)

    monkeypatch.setenv(f"AMARIS_{section.upper()}__SCORERS", "1")
    with pytest.raises(ConfigError) as error:
        load_settings(None)
    assert f"{section}.scorers (AMARIS_{section.upper()}__SCORERS): unknown key" in str(error.value)


def test_agent_options_inherit_field_by_field() -> None:
    settings = load_settings(
        None,
        **{
            "agents.default.model": "base-model",
            "agents.default.max_tokens": 100,
            "agents.updater.max_tokens": 200,
            "agents.updater.extra_body": {"top_k": 20},
            "agents.scorer.logprobs": True,
            "client.default.base_url": "http://127.0.0.1:9/v1",
            "client.analyzer.base_url": "https://api.example/v1",
        },
    )
    updater = settings.agent_options("updater")
    assert updater.extra_body is not None
    assert (updater.model, updater.max_tokens, updater.extra_body.root) == (
        "base-model",
        200,
        {"top_k": 20},
    )
    assert (updater.temperature, updater.structured_output, updater.samples) == (0.0, "auto", 1)
    assert updater.timeout == 600.0  # the default endpoint is on this machine
    assert settings.agent_options("analyzer").timeout == 60.0  # a hosted one
    assert settings.agent_options("analyzer").max_tokens == 100
    assert settings.agent_options("scorer").max_response_bytes == 4_194_304  # logprobs
    assert settings.agent_options("summarizer").max_response_bytes == 262_144
