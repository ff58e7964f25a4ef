"""The whole configuration: :class:`Settings`, one section per top-level key."""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from amaris.settings.agents import (
    AGENTS,
    AUDITOR,
    CHEAP_SCORER,
    AgentName,
    AgentsSettings,
    ClientSettings,
    ConcurrencySettings,
    PromptsSettings,
    ResolvedAgentOptions,
    is_local_url,
)
from amaris.settings.audit import AuditSettings
from amaris.settings.criteria import RubricItem
from amaris.settings.judge_canaries import JudgeCanarySettings
from amaris.settings.sections import (
    GatewaySettings,
    LoggingSettings,
    MemorySettings,
    ModelPrice,
    PipelineSettings,
    PrefectSettings,
    RubricSettings,
    ScoringSettings,
)
from amaris.settings.server import ServerSettings

ENV_PREFIX = "AMARIS_"
"""Environment variables ``AMARIS_<SECTION>__<KEY>`` set ``<section>.<key>``."""
ENV_NESTED_DELIMITER = "__"
ENV_NULL = "null"
"""An environment value that sets a key to null."""

log = logging.getLogger("amaris.settings")
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Log ``message`` once per process (a configuration is validated more than once)."""
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


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
    judge_canaries: JudgeCanarySettings = JudgeCanarySettings()
    audit: AuditSettings = AuditSettings()
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
        served = self.served_agents
        offline = self.client.offline_agents(served)
        if len(offline) == len(served):
            return self
        unasked = [a for a in offline if not self.client.for_agent(a).offline]
        if unasked:
            online = [a for a in served if a not in offline]
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
    def _rate_limit_fits_the_timeout(self) -> Settings:
        # A judge call waiting for the scorer's rate limit waits within
        # scoring.timeout_seconds (the rollout's bound, queueing included), outside the
        # attempt's own timeout: a full queue that cannot drain within it is unscored.
        rpm = self.client.for_agent("scorer").requests_per_minute
        timeout, pending = self.scoring.timeout_seconds, self.scoring.max_pending
        if rpm is not None and timeout is not None and pending is not None:
            drain = pending * self.agents.for_agent("scorer").samples * 60 / rpm
            if drain > timeout:
                _warn_once(
                    f"client.scorer.requests_per_minute ({rpm}) drains a full queue "
                    f"(scoring.max_pending: {pending} rollouts) in {drain:.0f} s, past "
                    f"scoring.timeout_seconds ({timeout:g} s): rollouts queued that long are "
                    "unscored (judge_timeout); raise the timeout (or null), or lower max_pending"
                )
        return self

    @model_validator(mode="after")
    def _listwise_alone(self) -> Settings:
        # The cascade decides per rollout on the cheap judge's confidence; a group's one
        # call has no per-rollout confidence to calibrate on.
        if self.scoring.group_mode == "listwise" and self.cascade_on:
            raise ValueError(
                "scoring.group_mode listwise does not combine with the cascade (a "
                "cheap_scorer is set): use one or the other"
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

    @property
    def auditor_on(self) -> bool:
        """Whether the audit judge runs: ``client.auditor`` or ``agents.auditor`` is set."""
        return self.client.auditor is not None or self.agents.auditor is not None

    @property
    def cascade_on(self) -> bool:
        """Whether the cheap scorer judges first (``scoring.cascade``): ``client.cheap_scorer``
        or ``agents.cheap_scorer`` is set."""
        return self.client.cheap_scorer is not None or self.agents.cheap_scorer is not None

    @property
    def served_agents(self) -> tuple[AgentName, ...]:
        """The agents this configuration serves: the six, the auditor and the cheap scorer
        when on."""
        auditor = (AUDITOR,) if self.auditor_on else ()
        return (*AGENTS, *auditor, *((CHEAP_SCORER,) if self.cascade_on else ()))

    def agent_options(self, agent: AgentName) -> ResolvedAgentOptions:
        """The options ``agent``'s requests are sent with (defaults sized for its endpoint)."""
        local = is_local_url(self.client.for_agent(agent).base_url)
        return self.agents.for_agent(agent, local=local)

    @property
    def log_dir(self) -> Path:
        """Folder of the LLM call log."""
        return self.logging.path or self.memory.path / "logs"
