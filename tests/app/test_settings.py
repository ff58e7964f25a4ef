"""config.yaml validation: AMARIS keys accepted, bad keys and values named."""

import logging
import re
from pathlib import Path

import pytest

from amaris.settings import AGENTS, ConfigError, load_settings, secret_value

REPO = Path(__file__).resolve().parents[2]

AMARIS_CONFIG = """
client:
  default: {api_key: null, base_url: null}
  analyzer: {api_key: "different_key", base_url: "https://custom-endpoint.com"}
agents:
  default: {model: "gpt-4o-mini", service_tier: "flex", response_format: {type: json_object}}
  scorer: {model: "gpt-4o-mini", temperature: 0.2, max_tokens: 512, timeout: 30}
  analyzer: {model: "gpt-4o", extra_body: {provider: {order: ["a"]}}}
concurrency: {total: 64, scorer: 32, analyzer: 8, summarizer: null, meta_summarizer: null,
              query_generator: null, updater: null}
memory:
  path: "./data/chroma"
  rubrics_path: "./data/rubrics.json"
  collection: "reward_memory"
  embedding_model: null
  static_memory_steps: 5
  dynamic_memory_limit_per_query: 3
  max_queries: null
  rubrics_mode: "global"
  per_instance_dir: "./data/per_instance"
  per_instance_rubrics_path: null
anchor_rubrics:
  - {text: "The model provides the correct final answer.", weight: 1.0}
adaptive_rubrics: []
prompts: {scorer: null, analyzer: null}
server: {host: "0.0.0.0", port: 8002, allowed_hosts: [amaris.internal]}
pipeline: {mode: "async", rollouts_per_step: null, use_chunking: true, chunk_size: 32,
           rubric_update_frequency: 1}
logging: {path: null}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_reference_amaris_config_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # As AMARIS reads it: the agents other than the analyzer judge with OPENAI_API_KEY.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with caplog.at_level(logging.WARNING, logger="amaris.settings"):
        settings = load_settings(write(tmp_path, AMARIS_CONFIG))
    # memory.per_instance_dir: accepted, ignored, and said to be
    assert [r.getMessage() for r in caplog.records] == [
        "memory.per_instance_dir is ignored: amaris keeps per-instance state in Qdrant "
        "(accepted for AMARIS configuration files)"
    ]
    assert "per_instance_dir" not in settings.memory.model_dump()
    assert settings.server.port == 8002
    assert settings.concurrency.scorer == 32
    assert settings.client.for_agent("analyzer").base_url == "https://custom-endpoint.com"
    assert settings.client.for_agent("scorer").base_url is None
    scorer = settings.agents.for_agent("scorer")
    assert (scorer.model, scorer.temperature, scorer.max_tokens, scorer.timeout) == (
        "gpt-4o-mini",
        0.2,
        512,
        30.0,
    )
    assert scorer.service_tier == "flex"  # inherited from agents.default
    analyzer = settings.agents.for_agent("analyzer")
    assert analyzer.model == "gpt-4o"
    assert analyzer.extra_body is not None
    assert analyzer.extra_body.root == {"provider": {"order": ["a"]}}
    assert settings.memory.path == Path("./data/chroma")
    assert settings.anchor_rubrics[0].text == "The model provides the correct final answer."


def test_shipped_config_yaml_is_valid_and_offline() -> None:
    settings = load_settings(REPO / "config.yaml")
    assert settings.client.default.api_key is None
    assert settings.client.default.base_url is None
    assert settings.server.host == "127.0.0.1"
    assert settings.pipeline.mode == "async"
    assert settings.pipeline.rollouts_per_step is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("server: {prot: 8002}", "server.prot: unknown key"),
        ("agents: {scorer: {temperatur: 0.1}}", "agents.scorer.temperatur: unknown key"),
        ("agents: {critic: {model: x}}", "agents.critic: unknown key"),
        ("surprise: 1", "surprise: unknown key"),
        ("server: {port: 70000}", "server.port"),
        ("pipeline: {mode: turbo}", "pipeline.mode"),
        ("pipeline: {rollouts_per_step: 0}", "pipeline.rollouts_per_step"),
        ("concurrency: {total: -1}", "concurrency.total"),
        ("client: {default: {max_concurrency: -1}}", "client.default.max_concurrency"),
        ("anchor_rubrics: [{text: '', weight: 1}]", "anchor_rubrics.0.text"),
        ("anchor_rubrics: [{text: 'a', weight: 0}]", "anchor_rubrics.0.weight"),
        ("anchor_rubrics: [{text: 'a', weight: -1}]", "at least one criterion needs a positive"),
        ("scoring: {on_failure: neutral}", "scoring"),
        ("memory: {rubrics_mode: both}", "memory.rubrics_mode"),
    ],
)
def test_bad_key_or_value_names_it(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text))
    assert named in str(info.value)


def test_unreadable_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(write(tmp_path, "server: [unclosed"))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_settings(write(tmp_path, "- a\n- b\n"))


def test_secrets_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("AMARIS_API_KEY", "amaris-env")
    settings = load_settings(write(tmp_path, "server: {port: 9000}"))
    assert secret_value(settings.client.default.api_key) == "sk-env"
    assert secret_value(settings.server.api_key) == "amaris-env"
    explicit = load_settings(write(tmp_path, "server: {api_key: from-file}"))
    assert secret_value(explicit.server.api_key) == "from-file"


def test_overrides_apply_after_the_file(tmp_path: Path) -> None:
    settings = load_settings(
        write(tmp_path, "server: {port: 9000, host: 0.0.0.0, allowed_hosts: [gpu-7]}"),
        **{"server.port": 9100, "memory.qdrant_url": None},
    )
    assert settings.server.port == 9100
    assert settings.server.host == "0.0.0.0"
    assert settings.memory.qdrant_url is None


def test_derived_paths(tmp_path: Path) -> None:
    settings = load_settings(None, **{"memory.path": str(tmp_path)})
    assert settings.memory.rubrics_export_path == tmp_path / "rubrics.json"
    assert settings.log_dir == tmp_path / "logs"


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:9001"),
        ("::", "http://127.0.0.1:9001"),
        ("10.0.0.5", "http://10.0.0.5:9001"),
        ("::1", "http://[::1]:9001"),
    ],
)
def test_local_url_reaches_the_api_from_this_machine(host: str, url: str) -> None:
    settings = load_settings(
        None, **{"server.host": host, "server.port": 9001, "server.allowed_hosts": ["gpu-7"]}
    )
    assert settings.server.local_url == url


@pytest.mark.parametrize(
    ("host", "allowed", "served"),
    [
        ("127.0.0.1", [], set()),
        ("0.0.0.0", ["GPU-7.lab.example.", "10.0.0.5"], {"gpu-7.lab.example", "10.0.0.5"}),
        ("::", ["FD00:0::7", "[::ffff:10.0.0.5]"], {"[fd00::7]", "[::ffff:a00:5]"}),
        ("10.0.0.5", [], {"10.0.0.5"}),
        ("::1", [], set()),
        ("Gpu-7", ["amaris_api"], {"gpu-7", "amaris_api"}),
    ],
)
def test_the_hosts_served_are_loopback_the_bound_one_and_those_listed(
    host: str, allowed: list[str], served: set[str]
) -> None:
    settings = load_settings(None, **{"server.host": host, "server.allowed_hosts": allowed})
    assert settings.server.served_hosts == {"localhost", "127.0.0.1", "[::1]", *served}


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_wildcard_bind_must_list_the_names_it_serves(host: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, **{"server.host": host})
    assert f"server.host {host!r} binds every interface: list in server.allowed_hosts" in str(
        info.value
    )


@pytest.mark.parametrize(
    "entry", ["http://gpu-7", "gpu-7:8002", "*.example", "gpu 7", "", "a/b", "-gpu", "x" * 64]
)
def test_an_allowed_host_is_a_name_or_an_address_alone(entry: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, **{"server.allowed_hosts": [entry]})
    assert "server.allowed_hosts: " in str(info.value)
    assert "is not a host name or an IP address" in str(info.value)


@pytest.mark.parametrize(
    ("base_url", "timeout", "limit"),
    [
        ("http://localhost:8000/v1", 600.0, 4),
        ("http://127.0.0.1:11434/v1", 600.0, 4),
        ("http://[::1]:8080/v1", 600.0, 4),
        ("https://api.openai.com/v1", 60.0, None),
        ("http://gpu-box.internal:8000/v1", 60.0, None),
        (None, 60.0, None),
    ],
)
def test_defaults_are_sized_for_the_endpoint(
    base_url: str | None, timeout: float, limit: int | None
) -> None:
    # A model served on this machine answers in minutes under load, a few requests at a time.
    settings = load_settings(
        None, **{"client.default.base_url": base_url, "client.default.api_key": "k"}
    )
    for agent in ("scorer", "analyzer", "updater"):
        assert settings.agent_options(agent).timeout == timeout
        assert settings.client.for_agent(agent).request_limit == limit


def test_timeout_and_endpoint_limit_set_per_agent() -> None:
    settings = load_settings(
        None,
        **{
            "client.default.base_url": "http://localhost:8000/v1",
            "client.default.max_concurrency": 0,  # no limit (a vLLM server batches many)
            "client.updater.base_url": "https://api.openai.com/v1",
            "client.updater.max_concurrency": 8,
            "agents.default.timeout": 1200,
            "agents.analyzer.timeout": 90,
        },
    )
    assert settings.client.for_agent("scorer").request_limit is None
    assert settings.client.for_agent("updater").request_limit == 8
    assert settings.agent_options("scorer").timeout == 1200
    assert settings.agent_options("analyzer").timeout == 90
    assert settings.agent_options("updater").timeout == 1200
    # an agent's own endpoint decides its built-in timeout
    remote = load_settings(
        None,
        **{
            "client.default.base_url": "http://localhost:8000/v1",
            "client.updater.base_url": "https://api.openai.com/v1",
        },
    )
    assert remote.agent_options("scorer").timeout == 600
    assert remote.agent_options("updater").timeout == 60


def test_reference_amaris_config_without_a_key_names_the_agents_left_offline(
    tmp_path: Path,
) -> None:
    # The analyzer has an endpoint, the others none: they would have judged offline, silently.
    with pytest.raises(ConfigError) as error:
        load_settings(write(tmp_path, AMARIS_CONFIG))
    message = str(error.value)
    assert (
        "client: scorer, summarizer, meta_summarizer, query_generator, updater have no "
        "LLM endpoint (no api_key, no base_url) while analyzer has one"
    ) in message
    assert "client.scorer, client.summarizer" in message
    assert "client.<agent>.offline: true" in message


def test_an_agent_served_offline_beside_an_llm_is_opted_in() -> None:
    settings = load_settings(
        None,
        **{
            "client.scorer.base_url": "http://127.0.0.1:9/v1",
            **{f"client.{a}.offline": True for a in AGENTS if a != "scorer"},
        },
    )
    assert settings.client.offline_agents() == [a for a in AGENTS if a != "scorer"]
    # and an agent may be taken off a default endpoint the same way
    settings = load_settings(
        None, **{"client.default.api_key": "sk-x", "client.updater.offline": True}
    )
    assert settings.client.offline_agents() == ["updater"]
    assert load_settings(None).client.offline_agents() == list(AGENTS)  # nothing configured


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (
            {"client.analyzer.offline": True, "client.analyzer.base_url": "http://x/v1"},
            "client.analyzer: Value error, offline: true serves the agent offline; it takes no "
            "api_key or base_url",
        ),
        (
            {"client.default.offline": True},
            "client: Value error, default.offline: set offline per agent",
        ),
    ],
)
def test_offline_with_an_endpoint_or_on_default_is_refused(
    overrides: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_settings(None, **overrides)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("server: {prot: 8002}", "  server.prot: unknown key (did you mean server.port?)"),
        ("pipline: {chunk_size: 3}", "  pipline: unknown key (did you mean pipeline?)"),
        (
            "agents: {scorre: {model: x}}",
            "  agents.scorre: unknown key (did you mean agents.scorer?)",
        ),
        ("agents: {critic: {model: x}}", "  agents.critic: unknown key"),
        ("agents: 5", "  agents: should be a mapping of its keys"),
        ("pipeline: {canary: [1]}", "  pipeline.canary: should be a mapping of its keys"),
    ],
)
def test_an_error_suggests_the_key_meant_and_names_no_class(
    tmp_path: Path, text: str, line: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text))
    assert line in str(info.value).splitlines()
    assert "Settings" not in str(info.value)
