"""The six LLM agents (and the audit judge) and the sections keyed by them: ``client``,
``agents``, ``concurrency``, ``prompts``.

Each of these sections holds one optional entry per agent (``<section>.<agent>``), a
shape declared once, in :class:`PerAgent`; a section adds its own head key
(``client.default``, ``agents.default``, ``concurrency.total``). ``client``, ``agents`` and
``concurrency`` also take an ``auditor`` entry (:data:`AUDITOR`): the audit judge, off
while neither ``client.auditor`` nor ``agents.auditor`` is set; and a ``cheap_scorer`` entry
(:data:`CHEAP_SCORER`): the cascade's first judge, off likewise. Both read the scorer's
prompt, so ``prompts`` has no entry for them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Generic, Literal, TypeVar, get_args
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, RootModel, SecretStr, model_validator

from amaris.jsonfile import JSONDict
from amaris.settings.base import Section
from amaris.settings.sections import TokenPrice

MethodAgent = Literal[
    "scorer",
    "analyzer",
    "summarizer",
    "meta_summarizer",
    "query_generator",
    "updater",
]
"""The name of one of the six LLM agents of the AMARIS method."""
AgentName = Literal[MethodAgent, "auditor", "cheap_scorer"]
"""The name of an LLM agent: one of the method's six, the audit judge or the cheap scorer."""
AGENTS: tuple[MethodAgent, ...] = get_args(MethodAgent)
"""The six agents, in the method's order."""
AUDITOR: AgentName = "auditor"
"""The audit judge: re-grades a sample of each step's rollouts with the scorer's prompt
(docs/fidelity.md). Served only when ``client.auditor`` or ``agents.auditor`` is set."""
CHEAP_SCORER: AgentName = "cheap_scorer"
"""The cascade's cheap judge: judges first with the scorer's prompt; the scorer only where
its confidence is under the calibrated threshold (``scoring.cascade``). Served only when
``client.cheap_scorer`` or ``agents.cheap_scorer`` is set."""


def template_agent(agent: AgentName) -> AgentName:
    """The agent whose prompt template ``agent`` asks with: the audit judge and the cheap
    scorer judge with the scorer's."""
    return "scorer" if agent in (AUDITOR, CHEAP_SCORER) else agent


StructuredOutput = Literal["auto", "json_schema", "json_object", "none"]
"""``agents.<agent>.structured_output``."""

MAX_SAMPLES = 16
"""Most verdicts per criterion ``agents.scorer.samples`` may ask for (each is a judge call)."""
SCORER_ONLY = ("samples", "logprobs")
"""Agent options only the judges of the hot path read: accepted under ``agents.scorer``
and ``agents.cheap_scorer`` alone."""
MAX_RESPONSE_BYTES = 262_144
"""``agents.<agent>.max_response_bytes`` by default: a judge reply's JSON (verdicts with
clipped reasons, an updater's proposal, a reasoning model's separate reasoning) is tens
of KB; a body past this is abandoned while it is read."""
MAX_RESPONSE_BYTES_LOGPROBS = 4_194_304
"""The same with ``agents.scorer.logprobs``: ``top_logprobs`` lists ~10 alternatives of
every token, hundreds of bytes a token."""

REMOTE_TIMEOUT_SECONDS = 60.0
"""Built-in ``agents.<agent>.timeout`` of an endpoint on another host (a hosted API)."""
LOCAL_TIMEOUT_SECONDS = 600.0
"""Built-in ``agents.<agent>.timeout`` of an endpoint on this machine: a self-hosted model
on one GPU or a CPU decodes one request at a time, or a few, and answers in minutes
under load."""
LOCAL_MAX_CONCURRENCY = 4
"""Built-in ``client.<agent>.max_concurrency`` of an endpoint on this machine."""

T = TypeVar("T")


# JSON of the provider's shape, not ours: sent as is (vLLM, OpenRouter... each take their own).
class ProviderJSON(RootModel[JSONDict]):
    """A JSON object an agent's configuration sends its provider as written: its
    ``response_format`` or ``extra_body`` (read as ``.root``; dumped as that JSON)."""

    model_config = ConfigDict(frozen=True)


class PerAgent(Section, Generic[T]):
    """One optional entry per agent, ``<section>.<agent>``; null = not set (the section's
    head key, or the built-in, applies). Its fields are :data:`AGENTS`, in order.

    A section is ``class XSettings(PerAgent[Entry], XHead)``: pydantic lists the fields of
    a base named later first, so the head key (``default``, ``total``) comes first, as in
    config.yaml and every dump.
    """

    scorer: T | None = None
    analyzer: T | None = None
    summarizer: T | None = None
    meta_summarizer: T | None = None
    query_generator: T | None = None
    updater: T | None = None

    def get(self, agent: AgentName) -> T | None:
        """``agent``'s own entry, None when unset."""
        entry: T | None = getattr(self, agent, None)
        return entry


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


# -- client ------------------------------------------------------------------------------------


class ClientOverride(Section):
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
    requests_per_minute: int | None = Field(default=None, gt=0)
    """Requests a minute to this endpoint and model, both paths together (a token bucket:
    a request waits for its turn instead of drawing a 429); null = the default client's,
    else none but what the endpoint's ``x-ratelimit-*`` headers say."""
    tokens_per_minute: int | None = Field(default=None, gt=0)
    """Tokens (prompt and completion) a minute to this endpoint and model, both paths
    together: a request waits for its estimate (prompt plus ``max_tokens``), settled with
    the ``usage`` it reports; null = the default client's, else none but the headers'."""
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


def has_endpoint(client: ClientOverride) -> bool:
    """Whether ``client`` names an LLM endpoint (a key for OpenAI, or a URL)."""
    return client.api_key is not None or client.base_url is not None


class _ClientHead(Section):
    default: ClientOverride = ClientOverride()
    """The endpoint of every agent, under its own entry's fields."""


class ClientSettings(PerAgent[ClientOverride], _ClientHead):
    """``client:``: the default endpoint plus optional per-agent overrides."""

    auditor: ClientOverride | None = None
    """The audit judge's endpoint (over ``default``); setting it turns the audit on."""
    cheap_scorer: ClientOverride | None = None
    """The cheap scorer's endpoint (over ``default``); setting it turns the cascade on."""

    @model_validator(mode="after")
    def _offline_per_agent(self) -> ClientSettings:
        if self.default.offline:
            raise ValueError(
                "default.offline: set offline per agent (client.<agent>.offline);"
                " with no endpoint anywhere every agent is offline already"
            )
        return self

    def for_agent(self, agent: AgentName) -> ClientOverride:
        """The endpoint an agent uses: its override merged over ``default`` (an agent
        with ``offline: true`` has none)."""
        override = self.get(agent)
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
            requests_per_minute=override.requests_per_minute or self.default.requests_per_minute,
            tokens_per_minute=override.tokens_per_minute or self.default.tokens_per_minute,
        )

    def offline_agents(self, agents: Sequence[AgentName] = AGENTS) -> list[AgentName]:
        """The ``agents`` (default: the six) served by the offline rule-based agents: those
        with no endpoint (no ``api_key``, no ``base_url`` after merging with ``default``)."""
        return [agent for agent in agents if not has_endpoint(self.for_agent(agent))]


# -- agents ------------------------------------------------------------------------------------


class AgentOptions(Section):
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
    response_format: ProviderJSON | None = None
    """Sent as is instead of what ``structured_output`` would send (no fallback)."""
    service_tier: str | None = None
    """OpenAI service tier, e.g. ``flex``."""
    extra_body: ProviderJSON | None = None
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
    price: TokenPrice | None = None
    """What the agent's tokens cost (dollars per million); null = ``pricing.<model>``, else
    no cost is known for its calls."""


class ResolvedAgentOptions(Section):
    """Agent options after inheritance: the values the gateway sends."""

    model: str
    temperature: float | None
    max_tokens: int | None
    timeout: float
    structured_output: StructuredOutput
    response_format: ProviderJSON | None
    service_tier: str | None
    extra_body: ProviderJSON | None
    context_window: int | None
    samples: int
    logprobs: bool
    max_response_bytes: int
    price: TokenPrice | None


BUILTIN_AGENT_OPTIONS = AgentOptions(
    model="gpt-4o-mini",
    temperature=0.0,
    structured_output="auto",
    samples=1,
    logprobs=False,
)
"""The base layer under ``agents.default``: a field left unset anywhere takes this value
(and ``timeout`` takes :data:`REMOTE_TIMEOUT_SECONDS` or :data:`LOCAL_TIMEOUT_SECONDS`,
``max_response_bytes`` :data:`MAX_RESPONSE_BYTES` or :data:`MAX_RESPONSE_BYTES_LOGPROBS`)."""


class _AgentsHead(Section):
    default: AgentOptions = AgentOptions()
    """Options of every agent, under its own entry's."""


class AgentsSettings(PerAgent[AgentOptions], _AgentsHead):
    """``agents:``: default options plus per-agent overrides, merged field by field over
    the built-in base (model gpt-4o-mini, temperature 0, timeout 60 s, or 600 s for an
    endpoint on this machine, structured output ``auto``)."""

    auditor: AgentOptions | None = None
    """The audit judge's options (over ``default``); setting it turns the audit on."""
    cheap_scorer: AgentOptions | None = None
    """The cheap scorer's options (over ``default``, not ``scorer``); setting it turns the
    cascade on."""

    @model_validator(mode="after")
    def _scorer_only(self) -> AgentsSettings:
        sections = [
            ("default", self.default),
            *((a, self.get(a)) for a in (*AGENTS, AUDITOR, CHEAP_SCORER)),
        ]
        for section, options in sections:
            if section in ("scorer", CHEAP_SCORER) or options is None:
                continue
            set_here = {"samples": options.samples, "logprobs": options.logprobs}
            for name in SCORER_ONLY:
                if set_here[name] is not None:
                    raise ValueError(
                        f"agents.{section}.{name}: only the scorer reads it (and the "
                        f"cheap scorer); set agents.scorer.{name} or agents.cheap_scorer.{name}"
                    )
        return self

    def for_agent(self, agent: AgentName, local: bool = False) -> ResolvedAgentOptions:
        """Options of ``agent``: its override, then ``default``, then the built-in base.

        ``local``: the agent's endpoint is on this machine (the longer built-in timeout);
        :meth:`Settings.agent_options` knows it.
        """
        merged = BUILTIN_AGENT_OPTIONS
        for layer in (self.default, self.get(agent)):
            if layer is not None:
                # The fields set to a value, as they are (ProviderJSON stays a model).
                update = {name: value for name, value in layer if value is not None}
                merged = merged.model_copy(update=update)
        timeout = merged.timeout or (LOCAL_TIMEOUT_SECONDS if local else REMOTE_TIMEOUT_SECONDS)
        max_response_bytes = merged.max_response_bytes or (
            MAX_RESPONSE_BYTES_LOGPROBS if merged.logprobs else MAX_RESPONSE_BYTES
        )
        return ResolvedAgentOptions.model_validate(
            merged.model_dump() | {"timeout": timeout, "max_response_bytes": max_response_bytes}
        )


# -- concurrency, prompts ----------------------------------------------------------------------

RequestLimit = Annotated[int, Field(gt=0)]
"""``concurrency.<agent>``: LLM calls in flight."""


class _ConcurrencyHead(Section):
    total: int | None = Field(default=None, gt=0)
    """LLM calls in flight across all agents."""


class ConcurrencySettings(PerAgent[RequestLimit], _ConcurrencyHead):
    """``concurrency:``: maximum LLM calls in flight; null = unlimited."""

    auditor: RequestLimit | None = None
    """The audit judge's calls in flight."""
    cheap_scorer: RequestLimit | None = None
    """The cheap scorer's calls in flight."""


class PromptsSettings(PerAgent[Path]):
    """``prompts:``: template file per agent; null = the built-in template."""
