"""One typed settings object, validated once from ``config.yaml`` and the environment.

Every section is a small pydantic model with ``extra="forbid"``, so a misspelt key
stops start-up with a message naming it (see :func:`load_settings`). Every key can also
be set as ``AMARIS_<SECTION>__<KEY>`` (pydantic-settings); the layers, lowest first:
built-in defaults, the YAML file, the environment, command-line overrides.

The modules: :mod:`~amaris.settings.schema` (the :class:`Settings` root) made of
:mod:`~amaris.settings.agents` (the six agents and the sections keyed by them),
:mod:`~amaris.settings.server`, :mod:`~amaris.settings.sections` (the rest) and
:mod:`~amaris.settings.criteria` (configured criteria and rules);
:mod:`~amaris.settings.loader` reads and validates them.
"""

from amaris.settings.agents import (
    AGENTS,
    AUDITOR,
    BUILTIN_AGENT_OPTIONS,
    CHEAP_SCORER,
    LOCAL_MAX_CONCURRENCY,
    LOCAL_TIMEOUT_SECONDS,
    MAX_RESPONSE_BYTES,
    MAX_RESPONSE_BYTES_LOGPROBS,
    MAX_SAMPLES,
    REMOTE_TIMEOUT_SECONDS,
    SCORER_ONLY,
    AgentName,
    AgentOptions,
    AgentsSettings,
    ClientOverride,
    ClientSettings,
    ConcurrencySettings,
    MethodAgent,
    PerAgent,
    PromptsSettings,
    ProviderJSON,
    ResolvedAgentOptions,
    StructuredOutput,
    has_endpoint,
    is_local_url,
    template_agent,
)
from amaris.settings.audit import AuditSettings, OnAlarm
from amaris.settings.base import Section, secret_value
from amaris.settings.criteria import (
    REFERENCE_RULES,
    ExactRule,
    JsonRule,
    LengthRule,
    NumericRule,
    RegexRule,
    RubricItem,
    RuleSpec,
)
from amaris.settings.judge_canaries import JudgeCanarySettings
from amaris.settings.loader import ConfigError, RawConfig, load_settings, set_dotted
from amaris.settings.schema import ENV_NESTED_DELIMITER, ENV_NULL, ENV_PREFIX, Settings
from amaris.settings.sections import (
    IGNORED_MEMORY_KEYS,
    CanarySettings,
    CascadeSettings,
    GatewaySettings,
    LoggingSettings,
    MemorySettings,
    ModelPrice,
    PipelineSettings,
    PrecheckSettings,
    PrefectSettings,
    RubricSettings,
    ScoringSettings,
    TokenPrice,
)
from amaris.settings.server import (
    LOOPBACK_HOSTS,
    WILDCARD_BINDS,
    ServerSettings,
    host_key,
)

__all__ = [
    "AGENTS",
    "AUDITOR",
    "BUILTIN_AGENT_OPTIONS",
    "CHEAP_SCORER",
    "ENV_NESTED_DELIMITER",
    "ENV_NULL",
    "ENV_PREFIX",
    "IGNORED_MEMORY_KEYS",
    "LOCAL_MAX_CONCURRENCY",
    "LOCAL_TIMEOUT_SECONDS",
    "LOOPBACK_HOSTS",
    "MAX_RESPONSE_BYTES",
    "MAX_RESPONSE_BYTES_LOGPROBS",
    "MAX_SAMPLES",
    "REFERENCE_RULES",
    "REMOTE_TIMEOUT_SECONDS",
    "SCORER_ONLY",
    "WILDCARD_BINDS",
    "AgentName",
    "AgentOptions",
    "AgentsSettings",
    "AuditSettings",
    "CanarySettings",
    "CascadeSettings",
    "ClientOverride",
    "ClientSettings",
    "ConcurrencySettings",
    "ConfigError",
    "ExactRule",
    "GatewaySettings",
    "JsonRule",
    "JudgeCanarySettings",
    "LengthRule",
    "LoggingSettings",
    "MemorySettings",
    "MethodAgent",
    "ModelPrice",
    "NumericRule",
    "OnAlarm",
    "PerAgent",
    "PipelineSettings",
    "PrecheckSettings",
    "PrefectSettings",
    "PromptsSettings",
    "ProviderJSON",
    "RawConfig",
    "RegexRule",
    "ResolvedAgentOptions",
    "RubricItem",
    "RubricSettings",
    "RuleSpec",
    "ScoringSettings",
    "Section",
    "ServerSettings",
    "Settings",
    "StructuredOutput",
    "TokenPrice",
    "has_endpoint",
    "host_key",
    "is_local_url",
    "load_settings",
    "secret_value",
    "set_dotted",
    "template_agent",
]
