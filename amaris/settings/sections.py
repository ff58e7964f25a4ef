"""The sections of the service's own machinery: ``memory``, ``pipeline``, ``logging``,
``prefect``, ``gateway``, ``scoring``, ``rubric``, ``pricing`` (and an agent's price)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from amaris.settings.base import Section

log = logging.getLogger("amaris.settings")  # the package's logger, as configured by operators

IGNORED_MEMORY_KEYS = {
    "per_instance_dir": "amaris keeps per-instance state in Qdrant (accepted for AMARIS "
    "configuration files)",
}
"""AMARIS ``memory:`` keys accepted and ignored, with the reason logged when one is set."""


class MemorySettings(Section):
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


class CanarySettings(Section):
    """``pipeline.canary``: a candidate rubric re-scores probes before it is published
    (docs/pipeline.md, "Rubric canary")."""

    enabled: bool = True
    """Run the canary on every candidate rubric that changes something."""
    max_share: float = Field(default=0.1, gt=0, le=1)
    """Scorer calls of the canary beyond one prompt's sure set, as a share of the step's
    rollouts (each call ``agents.scorer.samples`` requests, as a rollout's)."""
    max_gap_shrink: float = Field(default=0.5, ge=0, le=1)
    """Refuse a candidate under which the mean reward gap between anchor-passing and
    anchor-failing probes shrinks by more than this share of the gap under the rubric in
    force, or of the gap under the anchors alone."""


class PipelineSettings(Section):
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


class LoggingSettings(Section):
    """``logging:``."""

    path: Path | None = None
    """Folder for the LLM call log; null = ``<memory.path>/logs``."""
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["text", "json"] = "text"
    """``json``: one JSON object per line (time, level, logger, request_id, message)."""


class PrefectSettings(Section):
    """``prefect:``: where step flows are orchestrated and repaired."""

    port: int | None = Field(default=4200, ge=1, le=65535)
    """Port of the Prefect server ``amaris serve`` runs on 127.0.0.1 when no
    ``PREFECT_API_URL`` is set (the UI's address); null or busy = a free port."""
    repair_interval_seconds: int | None = Field(default=300, ge=10)
    """How often the scheduled repair re-runs failed steps; null = no schedule."""
    keep_steps: int | None = Field(default=200, ge=1)
    """Prefect's history of the newest N steps is kept: the runs of older steps that are
    done go with their task runs, logs and artifacts, and so do the scheduled repair's
    runs beyond its newest N; null = no bound by count."""
    retention_hours: float | None = Field(default=168.0, gt=0)
    """Runs of done steps, and repair runs, that ended longer ago go too, and Prefect keeps
    its events this long (its events retention); null = no bound by age (events: Prefect's
    own default)."""
    retention_interval_seconds: float = Field(default=600.0, gt=0)
    """How often amaris applies ``keep_steps`` / ``retention_hours`` (and Prefect's server
    vacuums old events)."""

    @property
    def retention_on(self) -> bool:
        """Whether amaris removes anything from Prefect's store."""
        return self.keep_steps is not None or self.retention_hours is not None


class GatewaySettings(Section):
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


class PrecheckSettings(Section):
    """``scoring.precheck``: degenerate replies (empty, punctuation only, a bare reasoning
    opener such as ``Solution`` or ``Let's solve this step by step.``, the prompt echoed)
    get ``floor`` without a judge call: "master keys" that fool many LLM judges."""

    enabled: bool = True
    """Run the pre-check before the judge (and the rule criteria)."""
    floor: float = Field(default=0.0, ge=0.0, le=1.0)
    """The reward of a degenerate reply."""


class CascadeSettings(Section):
    """``scoring.cascade``: the cheap scorer judges first, the scorer only where the cheap
    verdict's confidence is under a threshold calibrated on pairs both judged
    (:mod:`amaris.scoring.calibration`). On while ``client.cheap_scorer`` or
    ``agents.cheap_scorer`` is set."""

    target_agreement: float = Field(default=0.95, gt=0, le=1)
    """Share of the cheap scorer's rewards that must match the scorer's (within
    ``tolerance``) among the rollouts it decides: the threshold is the lowest confidence
    at which the calibration pairs hold it."""
    tolerance: float = Field(default=0.05, ge=0, le=1)
    """Two rewards further apart than this disagree; doubtful verdicts that cannot move the
    reward by more do not lower a rollout's confidence."""
    min_pairs: int = Field(default=64, ge=1)
    """Calibration pairs needed before the threshold is trusted; until then every rollout
    is escalated to the scorer."""
    max_pairs: int = Field(default=4096, ge=1)
    """Calibration pairs kept, the newest (persisted in the data folder)."""
    probe_share: float = Field(default=0.1, ge=0, le=1)
    """Share of the confident rollouts judged by the scorer too (and answered with its
    reward): the pairs that keep the calibration honest above the threshold."""

    @model_validator(mode="after")
    def _pairs_fit(self) -> CascadeSettings:
        if self.max_pairs < self.min_pairs:
            raise ValueError("max_pairs must be at least min_pairs")
        return self


class ScoringSettings(Section):
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
    cascade: CascadeSettings = CascadeSettings()
    """The calibrated cascade of a cheap scorer and the scorer."""
    group_mode: Literal["pointwise", "listwise"] = "pointwise"
    """``pointwise``: each rollout judged in a call of its own. ``listwise``: the rollouts
    of one batch with the same ``group_id`` (and step, rubric, prompt) judged in one call,
    in a shuffled order (:mod:`amaris.scoring.group`)."""
    group_max_rollouts: int = Field(default=16, ge=2, le=64)
    """Most rollouts in one listwise call; a larger group is split (as one that does not
    fit the judge's context budget)."""
    group_wait_seconds: float = Field(default=5.0, gt=0)
    """Longest a group's call waits for its last rollout once the first is ready; the
    rollouts ready by then are judged together, a later one on its own."""
    group_bias_bound: float = Field(default=0.1, gt=0, le=1)
    """Listwise: a warning is logged when the mean reward at one shown position departs
    from its group's mean by more than this, after enough groups."""

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


class RubricSettings(Section):
    """``rubric:``: what amaris does with criteria that stop telling rollouts apart."""

    retire_uninformative_after: int | None = Field(default=None, ge=1, le=1000)
    """Retire an adaptive criterion saturated (one end of the scale holds 95% of its
    verdicts) or with zero spread (equal verdicts in every group) for this many
    consecutive steps under the same text, unless the update rewords it; anchors never.
    null = never (the statistics are computed, shown and given to the updater anyway)."""


class ModelPrice(Section):
    """``pricing.<model>``: what one model's tokens cost, in dollars per million tokens."""

    prompt: float = Field(ge=0)
    """Prompt (input) tokens."""
    completion: float = Field(ge=0)
    """Completion (output) tokens, reasoning tokens included."""
    cached_prompt: float | None = Field(default=None, ge=0)
    """Prompt tokens served from the provider's prefix cache; null = the ``prompt`` price."""

    @property
    def token_price(self) -> TokenPrice:
        """The same price as an agent's ``price`` reads."""
        return TokenPrice(
            input_per_mtok=self.prompt,
            cached_input_per_mtok=self.cached_prompt,
            output_per_mtok=self.completion,
        )


class TokenPrice(Section):
    """``agents.<agent>.price``: what an agent's tokens cost, in dollars per million tokens
    (over ``pricing.<model>``, which prices by model whatever the agent)."""

    input_per_mtok: float = Field(ge=0)
    """Prompt (input) tokens."""
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    """Prompt tokens served from the provider's prefix cache; null = ``input_per_mtok``."""
    output_per_mtok: float = Field(ge=0)
    """Completion (output) tokens, reasoning tokens included."""
