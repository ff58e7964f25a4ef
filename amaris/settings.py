"""One typed settings object, validated once from ``config.yaml`` and the environment.

Every section is a small pydantic model with ``extra="forbid"``, so a misspelt key
stops start-up with a message naming it (see :func:`load_settings`). Every key can also
be set as ``AMARIS_<SECTION>__<KEY>`` (pydantic-settings); the layers, lowest first:
built-in defaults, the YAML file, the environment, command-line overrides.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import re2
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, SettingsError

AGENTS: tuple[str, ...] = (
    "scorer",
    "analyzer",
    "summarizer",
    "meta_summarizer",
    "query_generator",
    "updater",
)
"""The six LLM agents of the AMARIS method."""

log = logging.getLogger("amaris.settings")

StructuredOutput = Literal["auto", "json_schema", "json_object", "none"]
"""``agents.<agent>.structured_output``."""

MAX_SAMPLES = 16
"""Most verdicts per criterion ``agents.scorer.samples`` may ask for (each is a judge call)."""
SCORER_ONLY = ("samples", "logprobs")
MAX_RESPONSE_BYTES = 262_144
"""``agents.<agent>.max_response_bytes`` by default: a judge reply's JSON (verdicts with
clipped reasons, an updater's proposal, a reasoning model's separate reasoning) is tens
of KB; a body past this is abandoned while it is read."""
MAX_RESPONSE_BYTES_LOGPROBS = 4_194_304
"""The same with ``agents.scorer.logprobs``: ``top_logprobs`` lists ~10 alternatives of
every token, some 400 bytes a token."""
"""Agent options only the scorer reads: accepted under ``agents.scorer`` alone."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


ENV_PREFIX = "AMARIS_"
"""Environment variables ``AMARIS_<SECTION>__<KEY>`` set ``<section>.<key>``."""
ENV_NESTED_DELIMITER = "__"
ENV_NULL = "null"
"""An environment value that sets a key to null."""


def secret_value(secret: SecretStr | None) -> str | None:
    """The text of a secret setting, for the one place that sends it (never to log)."""
    return secret.get_secret_value() if secret is not None else None


REMOTE_TIMEOUT_SECONDS = 60.0
"""Built-in ``agents.<agent>.timeout`` of an endpoint on another host (a hosted API)."""
LOCAL_TIMEOUT_SECONDS = 600.0
"""Built-in ``agents.<agent>.timeout`` of an endpoint on this machine: a self-hosted model
on one GPU or a CPU decodes one request at a time, or a few, and answers in minutes
under load."""
LOCAL_MAX_CONCURRENCY = 4
"""Built-in ``client.<agent>.max_concurrency`` of an endpoint on this machine."""


def is_local_url(base_url: str | None) -> bool:
    """Whether ``base_url`` names this machine: ``localhost`` (or a ``*.localhost`` name)
    or a loopback address (``127.0.0.0/8``, ``::1``)."""
    if not base_url:
        return False
    try:
        host = urlsplit(base_url).hostname
    except ValueError:  # not a URL: the SDK will say so
        return False
    if host is None:
        return False
    host = host.rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ClientOverride(_Section):
    """Connection to an OpenAI-compatible endpoint."""

    api_key: SecretStr | None = None
    """API key; null falls back to the default client, then to ``OPENAI_API_KEY``. A secret:
    shown as ``**********`` in reprs, dumps and errors."""
    base_url: str | None = None
    """Endpoint URL, e.g. ``http://localhost:8000/v1``; null = the default client's / OpenAI."""
    max_concurrency: int | None = Field(default=None, ge=0)
    """Requests in flight to this endpoint, on each path (scoring, step pipeline), whichever
    agents send them; null = the default client's, else 4 for an endpoint on this machine
    (``localhost``, a loopback address) and no limit for others; 0 = no limit."""
    offline: bool = False
    """Serve this agent with the offline rule-based agents although others have an
    endpoint (a per-agent entry only, without ``api_key`` or ``base_url``). Without it, an
    agent left with no endpoint while another has one stops start-up."""

    @model_validator(mode="after")
    def _offline_has_no_endpoint(self) -> ClientOverride:
        if self.offline and (self.api_key is not None or self.base_url is not None):
            raise ValueError(
                "offline: true serves the agent offline; it takes no api_key or base_url"
            )
        return self

    @property
    def request_limit(self) -> int | None:
        """``max_concurrency`` with its default applied; None = no limit."""
        if self.max_concurrency is not None:
            return self.max_concurrency or None
        return LOCAL_MAX_CONCURRENCY if is_local_url(self.base_url) else None


class ClientSettings(_Section):
    """``client:``: the default endpoint plus optional per-agent overrides."""

    default: ClientOverride = ClientOverride()
    scorer: ClientOverride | None = None
    analyzer: ClientOverride | None = None
    summarizer: ClientOverride | None = None
    meta_summarizer: ClientOverride | None = None
    query_generator: ClientOverride | None = None
    updater: ClientOverride | None = None

    @model_validator(mode="after")
    def _offline_per_agent(self) -> ClientSettings:
        if self.default.offline:
            raise ValueError(
                "default.offline: set offline per agent (client.<agent>.offline);"
                " with no endpoint anywhere every agent is offline already"
            )
        return self

    def for_agent(self, agent: str) -> ClientOverride:
        """The endpoint an agent uses: its override merged over ``default`` (an agent
        with ``offline: true`` has none)."""
        override: ClientOverride | None = getattr(self, agent)
        if override is None:
            return self.default
        if override.offline:
            return override
        return ClientOverride(
            api_key=override.api_key or self.default.api_key,
            base_url=override.base_url or self.default.base_url,
            max_concurrency=(
                override.max_concurrency
                if override.max_concurrency is not None
                else self.default.max_concurrency
            ),
        )

    def offline_agents(self) -> list[str]:
        """The agents served by the offline rule-based agents: those with no endpoint (no
        ``api_key``, no ``base_url`` after merging with ``default``)."""
        return [agent for agent in AGENTS if not has_endpoint(self.for_agent(agent))]


def has_endpoint(client: ClientOverride) -> bool:
    """Whether ``client`` names an LLM endpoint (a key for OpenAI, or a URL)."""
    return client.api_key is not None or client.base_url is not None


class AgentOptions(_Section):
    """Sampling and request options of one agent; null = inherit from ``agents.default``."""

    model: str | None = None
    """Model name (the deployment name on Azure)."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """Sampling temperature."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Upper bound on completion tokens."""
    timeout: float | None = Field(default=None, gt=0)
    """Seconds before one HTTP attempt is abandoned (then retried as transient); null =
    60, or 600 when the agent's endpoint is on this machine (a self-hosted model)."""
    structured_output: StructuredOutput | None = None
    """How the reply is constrained: ``auto`` asks for the agent's strict JSON schema and
    falls back per endpoint to ``json_object``, then to the prompt alone, when refused;
    ``json_schema``, ``json_object``, ``none``: that mode only."""
    response_format: dict[str, Any] | None = None
    """Sent as is instead of what ``structured_output`` would send (no fallback)."""
    service_tier: str | None = None
    """OpenAI service tier, e.g. ``flex``."""
    extra_body: dict[str, Any] | None = None
    """Provider-specific request fields (OpenRouter, vLLM...)."""
    context_window: int | None = Field(default=None, gt=0)
    """The model's context window in tokens; null = the ``max_model_len`` the endpoint's
    ``/v1/models`` lists for the model (vLLM), else unknown (no budget is applied)."""
    samples: int | None = Field(default=None, ge=1, le=MAX_SAMPLES)
    """Scorer only: judge calls per rollout; each criterion's verdict is the mean of the
    ``samples`` verdicts (``samples`` times the judge tokens). Informative only at a
    temperature above 0."""
    logprobs: bool | None = None
    """Scorer only: ask for ``logprobs`` / ``top_logprobs`` and take each verdict as the
    expected value over the score tokens 0-4 (the plain verdict where none come back)."""
    max_response_bytes: int | None = Field(default=None, ge=1024)
    """Largest response body read from the agent's endpoint, in bytes: a longer one is
    abandoned while it is read (``judge_oversize``); null = 256 KiB, or 4 MiB for a scorer
    with ``logprobs``."""


class ResolvedAgentOptions(_Section):
    """Agent options after inheritance: the values the gateway sends."""

    model: str
    temperature: float | None
    max_tokens: int | None
    timeout: float
    structured_output: StructuredOutput
    response_format: dict[str, Any] | None
    service_tier: str | None
    extra_body: dict[str, Any] | None
    context_window: int | None
    samples: int
    logprobs: bool
    max_response_bytes: int


_BUILTIN_AGENT_OPTIONS: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "temperature": 0.0,
    "structured_output": "auto",
    "samples": 1,
    "logprobs": False,
}
"""The base layer under ``agents.default``: a field left unset anywhere takes this value
(and ``timeout`` takes :data:`REMOTE_TIMEOUT_SECONDS` or :data:`LOCAL_TIMEOUT_SECONDS`)."""


class AgentsSettings(_Section):
    """``agents:``: default options plus per-agent overrides, merged field by field over
    the built-in base (model gpt-4o-mini, temperature 0, timeout 60 s, or 600 s for an
    endpoint on this machine, structured output ``auto``)."""

    default: AgentOptions = AgentOptions()
    scorer: AgentOptions | None = None
    analyzer: AgentOptions | None = None
    summarizer: AgentOptions | None = None
    meta_summarizer: AgentOptions | None = None
    query_generator: AgentOptions | None = None
    updater: AgentOptions | None = None

    @model_validator(mode="after")
    def _scorer_only(self) -> AgentsSettings:
        for section in ("default", *AGENTS):
            options: AgentOptions | None = getattr(self, section)
            if section == "scorer" or options is None:
                continue
            for name in SCORER_ONLY:
                if getattr(options, name) is not None:
                    raise ValueError(
                        f"agents.{section}.{name}: only the scorer reads it; "
                        f"set agents.scorer.{name}"
                    )
        return self

    def for_agent(self, agent: str, local: bool = False) -> ResolvedAgentOptions:
        """Options of ``agent``: its override, then ``default``, then the built-in base.

        ``local``: the agent's endpoint is on this machine (the longer built-in timeout);
        :meth:`Settings.agent_options` knows it.
        """
        merged: dict[str, Any] = {
            "max_tokens": None,
            "service_tier": None,
            "extra_body": None,
            "response_format": None,
            "context_window": None,
            **_BUILTIN_AGENT_OPTIONS,
            "timeout": LOCAL_TIMEOUT_SECONDS if local else REMOTE_TIMEOUT_SECONDS,
        }
        merged.update(self.default.model_dump(exclude_none=True))
        override: AgentOptions | None = getattr(self, agent)
        if override is not None:
            merged.update(override.model_dump(exclude_none=True))
        merged.setdefault(
            "max_response_bytes",
            MAX_RESPONSE_BYTES_LOGPROBS if merged["logprobs"] else MAX_RESPONSE_BYTES,
        )
        return ResolvedAgentOptions(**merged)


class ConcurrencySettings(_Section):
    """``concurrency:``: maximum LLM calls in flight; null = unlimited."""

    total: int | None = Field(default=None, gt=0)
    scorer: int | None = Field(default=None, gt=0)
    analyzer: int | None = Field(default=None, gt=0)
    summarizer: int | None = Field(default=None, gt=0)
    meta_summarizer: int | None = Field(default=None, gt=0)
    query_generator: int | None = Field(default=None, gt=0)
    updater: int | None = Field(default=None, gt=0)


IGNORED_MEMORY_KEYS = {
    "per_instance_dir": "amaris keeps per-instance state in Qdrant (accepted for AMARIS "
    "configuration files)",
}
"""AMARIS ``memory:`` keys accepted and ignored, with the reason logged when one is set."""


class MemorySettings(_Section):
    """``memory:``: the data folder, the rubric store and (pipeline) semantic memory."""

    @model_validator(mode="before")
    @classmethod
    def _ignore_amaris_only_keys(cls, data: Any) -> Any:
        # AMARIS's reference config.yaml carries these; amaris has no use for them. Accepted
        # so such a file loads, dropped so nothing can come to depend on them, and named in
        # a warning so nobody believes they take effect.
        if isinstance(data, dict):
            ignored = [key for key in IGNORED_MEMORY_KEYS if key in data]
            if ignored:
                data = {k: v for k, v in data.items() if k not in IGNORED_MEMORY_KEYS}
                for key in ignored:
                    log.warning("memory.%s is ignored: %s", key, IGNORED_MEMORY_KEYS[key])
        return data

    path: Path = Path("./data")
    """The data folder: embedded Qdrant, the embedded rollout log, logs and exports live
    under it."""
    rubrics_path: Path | None = None
    """Human-readable export of every rubric version; null = ``<path>/rubrics.json``."""
    qdrant_url: str | None = None
    """Qdrant server URL; null = embedded Qdrant in ``<path>/qdrant`` (and, with one
    replica, the rollout log in ``<path>/rollout_log.sqlite3``)."""
    collection: str = Field(default="amaris", min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    """Prefix of every Qdrant collection amaris creates."""
    embedding_model: str | None = None
    """Embedder for semantic memory; null = local all-MiniLM-L6-v2."""
    static_memory_steps: int = Field(default=5, ge=0)
    """Recent step summaries given to the updater."""
    dynamic_memory_limit_per_query: int = Field(default=3, ge=0)
    """Semantic search results per memory query."""
    max_queries: int | None = Field(default=None, gt=0)
    """Memory queries per update; null = adaptive."""
    rubrics_mode: Literal["global", "per_instance"] = "global"
    """One rubric for all inputs, or one per input id."""
    per_instance_rubrics_path: Path | None = None
    """JSON with rubrics preloaded per input id."""
    rubric_refresh_seconds: float | None = Field(default=5.0, gt=0)
    """How often the rubric version in force is re-read from Qdrant, so a version
    published by another process (a replica, a rollback) is used; null = never."""
    rollout_retention_steps: int | None = Field(default=8, ge=1)
    """Steps whose rollouts stay in the rollout log after they are done (older ones are
    archived to ``<path>/rollouts/step-N.jsonl`` and dropped); null = keep all."""
    analysis_retention_steps: int | None = Field(default=16, ge=1)
    """Steps whose full analyses stay in Qdrant; null = keep all. Summaries, rubric
    updates and flagged findings are kept for the whole run."""
    rollout_log_synchronous: Literal["full", "normal"] = "full"
    """SQLite ``synchronous`` of the embedded rollout log (``<path>/rollout_log.sqlite3``):
    ``full`` fsyncs every commit, so a rollout that got its reward survives a power loss;
    ``normal`` survives a crash of amaris but may lose the last commits to a power loss
    or an OS crash."""

    @property
    def rubrics_export_path(self) -> Path:
        """Where ``rubrics.json`` is written."""
        return self.rubrics_path or self.path / "rubrics.json"


class PromptsSettings(_Section):
    """``prompts:``: template file per agent; null = the built-in template."""

    scorer: Path | None = None
    analyzer: Path | None = None
    summarizer: Path | None = None
    meta_summarizer: Path | None = None
    query_generator: Path | None = None
    updater: Path | None = None


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""``Host`` names the API always answers (with any port): this machine's own."""
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
"""``server.host`` values that bind every interface: no name of their own."""
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re2.compile(rf"{_LABEL}(\.{_LABEL})*")
"""A DNS name (``_`` allowed: container names have it), matched in lower case."""


def host_key(host: str) -> str:
    """``host`` as a request's ``Host`` header names it, without a port: lower case, no
    trailing dot, an IPv6 address in brackets in its short form (``[::1]``).

    Raises:
        ValueError: ``host`` is neither a DNS name nor an IP address (a URL, a port...).
    """
    name = host.strip().lower().removesuffix(".")
    try:
        address = ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
    except ValueError:
        if not _HOST_NAME.fullmatch(name) or len(name) > 253:
            raise ValueError(
                f"{host!r} is not a host name or an IP address (give the name alone: no "
                "scheme, port, path or wildcard)"
            ) from None
        return name
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


class ServerSettings(_Section):
    """``server:``: the HTTP endpoint."""

    host: str = "127.0.0.1"
    """Bind address; ``0.0.0.0`` exposes the service to the network."""
    port: int = Field(default=8002, ge=1, le=65535)
    api_key: SecretStr | None = None
    """When set (or ``AMARIS_API_KEY``), every path but /healthz needs ``Bearer <key>``
    (the OpenAPI schema and docs included). A secret: never shown."""
    max_body_bytes: int = Field(default=4_000_000, gt=0)
    """Larger request bodies get 413 (by their Content-Length, else as they stream in)."""
    body_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    """A request body must have arrived whole this long after its headers, else 408."""
    max_connections: int = Field(default=1024, gt=0)
    """Connection cap (uvicorn's ``limit_concurrency``): a request arriving while this many
    connections are open (its own included) or this many requests run gets 503."""
    max_batch_items: int = Field(default=1024, gt=0)
    """Most items one /batch_score request may carry."""
    max_wait_seconds: float = Field(default=300.0, gt=0, le=86400)
    """Longest one ``GET /rubric_status/wait`` is held open (a longer or absent
    ``timeout`` is capped; the answer is then ``pending`` and the client asks again)."""
    replica_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$"
    )
    """This replica's name when ``pipeline.executor`` is ``deployment`` (its rollout-log
    sequence and the step runs it executes); null = ``<hostname>:<port>``. Keep it stable
    across restarts of one replica and distinct between replicas."""

    allowed_hosts: list[str] = Field(default_factory=list, max_length=256)
    """Names (or addresses) clients reach the API by, besides ``localhost``, ``127.0.0.1``,
    ``[::1]`` and ``host`` itself (when it is not a wildcard); a request whose ``Host`` is
    none of these gets 421. Required when ``host`` is a wildcard (``0.0.0.0``, ``::``):
    what stops a web page from reaching the API through DNS rebinding."""

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, names: list[str]) -> list[str]:
        return [host_key(name) for name in names]

    @model_validator(mode="after")
    def _wildcard_names_its_hosts(self) -> ServerSettings:
        if self.host not in WILDCARD_BINDS:
            host_key(self.host)  # a bind address that is no name stops start-up here
        elif not self.allowed_hosts:
            raise ValueError(
                f"server.host {self.host!r} binds every interface: list in "
                "server.allowed_hosts the names and addresses clients reach it by (e.g. "
                "[amaris.internal, 10.0.0.5]); requests under any other Host get 421"
            )
        return self

    @property
    def served_hosts(self) -> frozenset[str]:
        """The ``Host`` names (as :func:`host_key` gives them) the API answers."""
        bound = () if self.host in WILDCARD_BINDS else (host_key(self.host),)
        return frozenset((*LOOPBACK_HOSTS, *bound, *self.allowed_hosts))

    @property
    def replica(self) -> str:
        """``replica_id``, or ``<hostname>:<port>``."""

        return self.replica_id or f"{socket.gethostname()}:{self.port}"

    @property
    def local_url(self) -> str:
        """Where a process on this machine reaches the API (a wildcard bind on loopback)."""
        host = "127.0.0.1" if self.host in {"0.0.0.0", "::"} else self.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"


class CanarySettings(_Section):
    """``pipeline.canary``: a candidate rubric re-scores probes before it is published
    (docs/pipeline.md, "Rubric canary")."""

    enabled: bool = True
    """Run the canary on every candidate rubric that changes something."""
    max_share: float = Field(default=0.1, gt=0, le=1)
    """Most scorer calls of the canary, as a share of the step's rollouts (each call
    ``agents.scorer.samples`` requests, as a rollout's)."""
    max_gap_shrink: float = Field(default=0.5, ge=0, le=1)
    """Refuse a candidate under which the mean reward gap between anchor-passing and
    anchor-failing probes shrinks by more than this share of the current gap."""


class PipelineSettings(_Section):
    """``pipeline:``: when and how a step's rubric evolution runs."""

    mode: Literal["async", "sync"] = "async"
    executor: Literal["local", "deployment"] = "local"
    """``local``: step flows run in this process (one replica). ``deployment``: steps are
    submitted as runs of the ``amaris-step/steps`` Prefect deployment (``deployments/
    steps.py``), which Prefect's runner in every replica, or a work pool's workers, execute
    in processes of their own; counts and step status are read from the shared store
    (several replicas)."""
    work_pool: str | None = Field(default=None, min_length=1)
    """With ``executor: deployment``: the Prefect work pool the step deployment goes to.
    Its workers run the steps (in processes of their own, which read ``AMARIS_CONFIG``)
    and the replicas only submit runs; null = every replica serves the deployment with a
    Prefect runner (whose runs read ``AMARIS_CONFIG`` too)."""
    rollouts_per_step: int | None = Field(default=None, gt=0)
    """Complete a step by itself after this many rollouts; null = manual /complete."""
    max_step: int = Field(default=10_000_000, ge=0)
    """Largest step number accepted (a rollout's ``current_step``, ``/complete``'s
    ``step``); training runs stay under 10^6 steps."""
    max_steps_ahead: int = Field(default=1000, ge=1)
    """How far past the newest step amaris knows a rollout may open a new step."""
    max_open_steps: int = Field(default=64, ge=1)
    """Most steps open at once; a rollout that would open one more is refused (409)."""
    use_chunking: bool = True
    chunk_size: int = Field(default=32, gt=0)
    rubric_update_frequency: int | None = Field(default=1, gt=0)
    """Update the rubric at steps 0, N, 2N...; 1 or null = every step."""
    max_adaptive_criteria: int = Field(default=12, ge=0, le=100)
    """Guardrail: most adaptive criteria a rubric version may hold."""
    adaptive_weight_min: float = Field(default=-2.0, ge=-100, le=0)
    """Guardrail: lowest adaptive weight (pitfalls are negative)."""
    adaptive_weight_max: float = Field(default=2.0, ge=0, le=100)
    """Guardrail: highest adaptive weight."""
    max_modifications: int = Field(default=5, ge=0, le=50)
    """Guardrail: most changes one update may make."""
    duplicate_similarity: float = Field(default=0.85, gt=0, le=1)
    """Guardrail: cosine similarity (the memory embedder's) from which an added or edited
    criterion duplicates another (anchors included). Calibrated on all-MiniLM-L6-v2."""
    edit_similarity: float = Field(default=0.5, ge=0, le=1)
    """Guardrail: an edit whose old and new text are less similar than this (or whose
    negations flip) changes the criterion's meaning: a retire plus an add, checked as such."""
    canary: CanarySettings = CanarySettings()
    """The rubric canary."""
    findings_per_step: int = Field(default=8, ge=0, le=256)
    """Flagged analyses per step kept in the searchable memory (besides summaries)."""
    task_retries: int = Field(default=3, ge=0, le=10)
    """Prefect retries of a pipeline task after a transient LLM failure (the step path's
    one retry layer: the pipeline's gateway itself makes one attempt per request)."""
    task_retry_delays_seconds: list[float] = Field(
        default_factory=lambda: [1.0, 5.0, 15.0], min_length=1
    )
    """Delays between those retries (the last repeats); jittered by 20%."""


class LoggingSettings(_Section):
    """``logging:``."""

    path: Path | None = None
    """Folder for the LLM call log; null = ``<memory.path>/logs``."""
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"
    """``json``: one JSON object per line (time, level, logger, request_id, message)."""


class PrefectSettings(_Section):
    """``prefect:``: where step flows are orchestrated and repaired."""

    port: int | None = Field(default=4200, ge=1, le=65535)
    """Port of the Prefect server ``amaris serve`` runs on 127.0.0.1 when no
    ``PREFECT_API_URL`` is set (the UI's address); null or busy = a free port."""
    repair_interval_seconds: int | None = Field(default=300, ge=10)
    """How often the scheduled repair re-runs failed steps; null = no schedule."""


class GatewaySettings(_Section):
    """``gateway:``: the one retry layer of every LLM call.

    Budget per call: ``max_attempts`` HTTP attempts for transient errors, and one
    corrective re-ask (with its own ``max_attempts``) when the output fails validation,
    so at most ``2 * max_attempts`` requests.
    """

    max_attempts: int = Field(default=4, ge=1, le=20)
    """HTTP attempts per request (1 = no retry)."""
    backoff_base_seconds: float = Field(default=0.5, gt=0)
    """First backoff; doubles each attempt, with full jitter."""
    backoff_max_seconds: float = Field(default=8.0, gt=0)
    """Cap of one backoff."""
    reask_on_invalid: bool = True
    """Ask once more, quoting the validation error, when output does not validate."""


class PrecheckSettings(_Section):
    """``scoring.precheck``: degenerate replies (empty, punctuation only, a bare reasoning
    opener such as ``Solution`` or ``Let's solve this step by step.``, the prompt echoed)
    get ``floor`` without a judge call: "master keys" that fool many LLM judges."""

    enabled: bool = True
    """Run the pre-check before the judge (and the rule criteria)."""
    floor: float = Field(default=0.0, ge=0.0, le=1.0)
    """The reward of a degenerate reply."""


class ScoringSettings(_Section):
    """``scoring:``: the hot path."""

    on_failure: Literal["null", "error", "neutral"] = "null"
    """When the judge gives no valid verdict: ``null`` = 200 with ``score: null``;
    ``error`` = 503 with Retry-After; ``neutral`` = ``neutral_score`` (explicit opt-in)."""
    neutral_score: float | None = Field(default=None, ge=0.0, le=1.0)
    """Required with ``on_failure: neutral``; never used otherwise."""
    retry_after_seconds: int = Field(default=5, ge=0)
    """Retry-After sent with ``on_failure: error``."""
    cache_size: int = Field(default=50_000, ge=0)
    """Scores kept for identical (rubric version, input, output, context); 0 disables."""
    max_field_chars: int = Field(default=100_000, gt=0)
    """Largest ``rollout.input`` / ``output`` / ``supplemental_context``, in characters."""
    oversize: Literal["reject", "truncate"] = "reject"
    """Over ``max_field_chars``: 413, or keep head and tail and flag ``truncated``."""
    max_pending: int | None = Field(default=1024, gt=0)
    """Judge calls queued or in flight on the hot path; beyond it /score answers 429 with
    Retry-After (a bound on queued work, so overload cannot grow memory and latency
    without limit); null = unbounded."""
    timeout_seconds: float | None = Field(default=300.0, gt=0)
    """Longest a rollout may wait for its verdict (queueing, retries and re-ask included);
    past it the rollout is unscored with reason ``judge_timeout``; null = no bound."""
    precheck: PrecheckSettings = PrecheckSettings()
    """The master-key pre-check: degenerate replies get the floor reward, unjudged."""

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        # Refused by name, not accepted: a config that still bounds regex rules by time
        # expects an "unscored" that can no longer happen (docs/configuration.md).
        if isinstance(data, dict) and "regex_timeout_seconds" in data:
            raise ValueError(
                "scoring.regex_timeout_seconds was removed: regex rule criteria run on RE2, "
                "in time linear in the reply, so there is no per-match timeout; delete the key"
            )
        return data

    @field_validator("on_failure", mode="before")
    @classmethod
    def _null_policy(cls, value: Any) -> Any:
        # The policy is named "null": an unquoted YAML null or AMARIS_SCORING__ON_FAILURE=null
        # (both read as None) mean it too.
        return "null" if value is None else value

    @model_validator(mode="after")
    def _neutral_needs_value(self) -> ScoringSettings:
        if self.on_failure == "neutral" and self.neutral_score is None:
            raise ValueError("on_failure 'neutral' needs scoring.neutral_score")
        return self


class RubricSettings(_Section):
    """``rubric:``: what amaris does with criteria that stop telling rollouts apart."""

    retire_uninformative_after: int | None = Field(default=None, ge=1, le=1000)
    """Retire an adaptive criterion saturated (one end of the scale holds 95% of its
    verdicts) or with zero spread (equal verdicts in every group) for this many
    consecutive steps under the same text, unless the update rewords it; anchors never.
    null = never (the statistics are computed, shown and given to the updater anyway)."""


class ModelPrice(_Section):
    """``pricing.<model>``: what one model's tokens cost, in dollars per million tokens."""

    prompt: float = Field(ge=0)
    """Prompt (input) tokens."""
    completion: float = Field(ge=0)
    """Completion (output) tokens, reasoning tokens included."""
    cached_prompt: float | None = Field(default=None, ge=0)
    """Prompt tokens served from the provider's prefix cache; null = the ``prompt`` price."""


class ExactRule(_Section):
    """``rule: {kind: exact}``: the reply's final answer equals the reference answer (in
    ``rollout.supplemental_context``), both canonical: numbers by value, words lowercased
    without punctuation."""

    kind: Literal["exact"]


class NumericRule(_Section):
    """``rule: {kind: numeric}``: the reply's final answer is a number within the tolerance
    of the reference's: ``|answer - reference| <= max(abs_tol, rel_tol * |reference|)``."""

    kind: Literal["numeric"]
    abs_tol: float = Field(default=0.0, ge=0.0)
    """Absolute tolerance."""
    rel_tol: float = Field(default=0.0, ge=0.0)
    """Tolerance relative to the reference's magnitude."""


class RegexRule(_Section):
    """``rule: {kind: regex}``: ``pattern`` is found in the reply. RE2 syntax (google-re2:
    Python's ``re`` without backreferences and lookarounds), matched in time linear in the
    reply; a pattern RE2 cannot compile is a configuration error naming the criterion."""

    kind: Literal["regex"]
    pattern: str = Field(min_length=1, max_length=1000)
    """Searched anywhere in the reply (anchor it with ``^``/``$`` for a whole match)."""
    ignore_case: bool = False
    """Match regardless of case."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re2.compile(value)
        except re2.error as exc:
            raise ValueError(
                f"RE2 cannot compile {value[:80]!r}: {exc} (regex rules use RE2 syntax: no "
                "backreferences, no lookahead or lookbehind)"
            ) from None
        return value


class LengthRule(_Section):
    """``rule: {kind: length}``: the reply's length in characters (whitespace at its ends
    not counted) is within the bounds."""

    kind: Literal["length"]
    min_chars: int | None = Field(default=None, ge=0)
    """Fewest characters; null = no lower bound."""
    max_chars: int | None = Field(default=None, ge=1)
    """Most characters; null = no upper bound."""

    @model_validator(mode="after")
    def _bounded(self) -> LengthRule:
        if self.min_chars is None and self.max_chars is None:
            raise ValueError("a length rule needs min_chars, max_chars or both")
        if (
            self.min_chars is not None
            and self.max_chars is not None
            and self.min_chars > self.max_chars
        ):
            raise ValueError(f"min_chars {self.min_chars} is above max_chars {self.max_chars}")
        return self


class JsonRule(_Section):
    """``rule: {kind: json}``: the reply (whitespace at its ends aside) is one JSON value."""

    kind: Literal["json"]


RuleSpec = Annotated[
    ExactRule | NumericRule | RegexRule | LengthRule | JsonRule, Field(discriminator="kind")
]
"""A deterministic check that stands for a criterion instead of a judge question."""
REFERENCE_RULES = ("exact", "numeric")
"""Rule kinds that compare with the reference answer in ``rollout.supplemental_context``."""


class RubricItem(_Section):
    """One configured criterion. A negative weight marks a pitfall."""

    text: str = Field(min_length=1, max_length=2000)
    weight: float = 1.0
    rule: RuleSpec | None = None
    """A deterministic check computed by amaris (no judge call) instead of asking the judge;
    null = a judge criterion. ``text`` then describes the check to people and the updater."""

    @field_validator("text")
    @classmethod
    def _strip(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("criterion text is empty")
        return value

    @field_validator("weight")
    @classmethod
    def _nonzero(cls, value: float) -> float:
        if value == 0 or abs(value) > 100:
            raise ValueError("weight must be non-zero and within [-100, 100]")
        return value


class Settings(BaseSettings):
    """The whole configuration. ``Settings()`` reads the environment over the built-in
    defaults; :func:`load_settings` adds the YAML file and the command line."""

    model_config = SettingsConfigDict(
        extra="forbid",
        frozen=True,
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        env_parse_none_str=ENV_NULL,
        case_sensitive=False,
    )

    client: ClientSettings = ClientSettings()
    agents: AgentsSettings = AgentsSettings()
    concurrency: ConcurrencySettings = ConcurrencySettings()
    memory: MemorySettings = MemorySettings()
    prompts: PromptsSettings = PromptsSettings()
    server: ServerSettings = ServerSettings()
    pipeline: PipelineSettings = PipelineSettings()
    logging: LoggingSettings = LoggingSettings()
    gateway: GatewaySettings = GatewaySettings()
    prefect: PrefectSettings = PrefectSettings()
    scoring: ScoringSettings = ScoringSettings()
    rubric: RubricSettings = RubricSettings()
    pricing: dict[str, ModelPrice] = Field(default_factory=dict)
    """Price per model name (as in ``agents.<agent>.model``): cost per step and per 1,000
    rollouts in step artifacts and simulator reports; empty = no cost shown."""
    anchor_rubrics: list[RubricItem] = Field(
        default_factory=lambda: [RubricItem(text="The response gives the correct final answer.")]
    )
    adaptive_rubrics: list[RubricItem] = Field(default_factory=list)

    @model_validator(mode="after")
    def _no_silent_offline(self) -> Settings:
        # The offline agents never stand in for a configured LLM unannounced: with an
        # endpoint for some agents, one left without must be a mistake unless opted in.
        offline = self.client.offline_agents()
        if len(offline) == len(AGENTS):
            return self
        unasked = [a for a in offline if not self.client.for_agent(a).offline]
        if unasked:
            online = [a for a in AGENTS if a not in offline]
            raise ValueError(
                f"client: {', '.join(unasked)} {'has' if len(unasked) == 1 else 'have'} no "
                f"LLM endpoint (no api_key, no base_url) while {', '.join(online)} "
                f"{'has' if len(online) == 1 else 'have'} one; give "
                + ", ".join(f"client.{a}" for a in unasked)
                + " a base_url or api_key (or set client.default, or OPENAI_API_KEY), or "
                "set client.<agent>.offline: true to serve it with the offline agents"
            )
        return self

    @model_validator(mode="after")
    def _rubrics(self) -> Settings:
        if not any(r.weight > 0 for r in [*self.anchor_rubrics, *self.adaptive_rubrics]):
            raise ValueError("anchor_rubrics: at least one criterion needs a positive weight")
        texts = [r.text.casefold() for r in [*self.anchor_rubrics, *self.adaptive_rubrics]]
        if len(set(texts)) != len(texts):
            raise ValueError("anchor_rubrics/adaptive_rubrics: duplicate criterion text")
        return self

    def agent_options(self, agent: str) -> ResolvedAgentOptions:
        """The options ``agent``'s requests are sent with (defaults sized for its endpoint)."""
        local = is_local_url(self.client.for_agent(agent).base_url)
        return self.agents.for_agent(agent, local=local)

    @property
    def log_dir(self) -> Path:
        """Folder of the LLM call log."""
        return self.logging.path or self.memory.path / "logs"


class ConfigError(Exception):
    """The configuration is invalid; the message names every offending key (and the
    environment variable that set it)."""


def _environment_names() -> dict[tuple[str, ...], str]:
    """``AMARIS_<SECTION>__<KEY>`` variables that set a key: their dotted path -> name."""
    found: dict[tuple[str, ...], str] = {}
    for name in os.environ:
        if not name.upper().startswith(ENV_PREFIX):
            continue
        path = tuple(name[len(ENV_PREFIX) :].lower().split(ENV_NESTED_DELIMITER))
        if path[0] in Settings.model_fields:
            found[path] = name
    return found


def _format_errors(
    error: ValidationError, source: str, environment: dict[tuple[str, ...], str]
) -> str:
    lines = [f"invalid configuration in {source}:"]
    for item in error.errors():
        loc = tuple(str(part) for part in item["loc"])
        key = ".".join(loc) or "(top level)"
        # The variables that set this key, a key inside it, or the section holding it.
        names = sorted(
            name
            for path, name in environment.items()
            if path[: len(loc)] == loc or loc[: len(path)] == path
        )
        if names:
            key = f"{key} ({', '.join(names)})"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"  {key}: {message}")
    return "\n".join(lines)


def _read_environment() -> dict[str, Any]:
    """The keys set by ``AMARIS_<SECTION>__<KEY>`` variables, as a raw mapping (JSON for a
    list or a mapping, ``null`` for null), read by pydantic-settings.

    Raises:
        ConfigError: a variable's value is not the JSON its key needs.
    """
    try:
        return EnvSettingsSource(Settings)()
    except SettingsError as exc:
        names = sorted(
            name for path, name in _environment_names().items() if f'"{path[0]}"' in str(exc)
        )
        raise ConfigError(
            f"invalid configuration in the environment: {', '.join(names)}: "
            f"not valid JSON ({exc.__cause__ or exc})"
        ) from None


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, mappings merged key by key."""
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        if isinstance(below, dict) and isinstance(value, dict):
            merged[key] = _merge(below, value)
        else:
            merged[key] = value
    return merged


def _apply_secret_fallbacks(raw: dict[str, Any]) -> dict[str, Any]:
    """``OPENAI_API_KEY`` and ``AMARIS_API_KEY`` where no layer sets the key."""
    client = raw.setdefault("client", {}) or {}
    raw["client"] = client
    default = client.setdefault("default", {}) or {}
    client["default"] = default
    if not default.get("api_key") and os.environ.get("OPENAI_API_KEY"):
        default["api_key"] = os.environ["OPENAI_API_KEY"]
    server = raw.setdefault("server", {}) or {}
    raw["server"] = server
    if not server.get("api_key") and os.environ.get("AMARIS_API_KEY"):
        server["api_key"] = os.environ["AMARIS_API_KEY"]
    return raw


def set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in a raw configuration mapping, creating the sections on the way."""
    node = raw
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[leaf] = value


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Read, merge with the environment and validate the configuration.

    Layers, each over the one before: the built-in defaults, the YAML file, the
    ``AMARIS_<SECTION>__<KEY>`` environment variables, ``overrides``; then
    ``OPENAI_API_KEY`` / ``AMARIS_API_KEY`` fill in an API key no layer set.

    Args:
        path: YAML file; None = built-in defaults only.
        overrides: dotted keys (``server.port=9000``, the command line's) applied last.

    Raises:
        ConfigError: unreadable file or invalid keys/values, naming each key (and the
            environment variable that set it). It carries no secret: the validation
            error, whose input values could hold one, is not chained.
    """
    source = str(path) if path is not None else "(defaults)"
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read configuration {source}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"configuration {source} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"configuration {source}: top level must be a mapping")
        raw = loaded or {}
    environment = _environment_names()
    if environment:
        source = f"{source} and the environment"
    raw = _merge(raw, _read_environment())
    for dotted, value in overrides.items():
        if value is None:
            continue
        set_dotted(raw, dotted, value)
    raw = _apply_secret_fallbacks(raw)
    try:
        return Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source, environment)) from None
