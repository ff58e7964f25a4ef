"""Prometheus metrics of one amaris process, on its own registry (``GET /metrics``).

Instruments record events as they happen: HTTP requests, LLM request latency, finished
steps. Judge, token, reward, rubric and step-status numbers are read at scrape time from
the counters the gateways (and their token ledger), the scorer, the rubric store and the
step coordinator already keep, so nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, get_args

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import Counter as CounterInstrument
from prometheus_client import Histogram as HistogramInstrument
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from amaris.llm.rate_limits import KINDS, RateLimits
from amaris.metric_families import counted
from amaris.scoring.cascade import cascade_metrics
from amaris.scoring.group_bias import group_metrics
from amaris.settings import AGENTS
from amaris.trust.audit.monitor import FidelityMonitor
from amaris.trust.rule_store import PrecheckRuleStore, ProbeKind

if TYPE_CHECKING:
    from amaris.llm.gateway import LLMGateway
    from amaris.llm.ledger import TokenLedger
    from amaris.rubric.store import RubricStore
    from amaris.scoring.scorer import Scorer
    from amaris.steps.coordinator import StepCoordinator

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format served by ``GET /metrics``."""

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Seconds, 5 ms to 120 s: a request is as slow as the judge behind it."""

STEP_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
"""Seconds, 1 s to 1 h: a step's flow analyses every rollout of the step."""

STEP_STATUSES = ("open", "completing", "done", "failed")
REWARD_STATUSES = ("scored", "cached", "degenerate", "unscored")
"""Each rollout answered counts in exactly one (the scorer's ``counters``)."""
TRUNCATION_CAUSES = ("max_field_chars", "context_window")
UNSCORED_REASONS = (
    "judge_unavailable",
    "judge_invalid",
    "judge_invalid_logprobs",
    "judge_oversize",
    "judge_truncated",
    "judge_context_overflow",
    "judge_timeout",
)
"""Reasons exported at 0 from the start (docs/configuration.md), so alerts can watch them."""
CANARY_OUTCOMES = ("passed", "refused", "skipped")
"""Rubric canary outcomes, exported at 0 from the start."""
JUDGE_CANARY_KINDS: tuple[str, ...] = get_args(ProbeKind)
"""Judge canary probe kinds, exported at 0 from the start."""


class Metrics:
    """The registry and instruments of one process (one app, in tests)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        http_labels = ["method", "route", "status"]
        self.http_requests = CounterInstrument(
            "amaris_http_requests",
            "HTTP requests by method, route template and status.",
            http_labels,
            registry=self.registry,
        )
        self.http_duration = HistogramInstrument(
            "amaris_http_request_duration_seconds",
            "HTTP request duration by method, route template and status.",
            http_labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.llm_call_duration = HistogramInstrument(
            "amaris_llm_call_duration_seconds",
            "Duration of successful LLM requests (one per HTTP attempt), by agent and path.",
            ["agent", "path"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.step_duration = HistogramInstrument(
            "amaris_step_duration_seconds",
            "Duration of step pipelines, done or failed.",
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        self.steps = CounterInstrument(
            "amaris_steps",
            "Step pipelines finished, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in ("done", "failed"):
            self.steps.labels(outcome)
        self._http_children: dict[
            tuple[str, str, int], tuple[CounterInstrument, HistogramInstrument]
        ] = {}
        self._state: Collector | None = None
        self._judge_canaries: Collector | None = None

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count and time one HTTP request."""
        key = (method, route, status)
        children = self._http_children.get(key)
        if children is None:
            # ``labels`` validates and locks on every call: each combination's two
            # children are looked up once (the instruments never drop a child).
            labels = (method, route, str(status))
            children = (self.http_requests.labels(*labels), self.http_duration.labels(*labels))
            self._http_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def llm_observer(self, path: str) -> Callable[[str, float], None]:
        """The gateway callback of ``path`` (``score`` or ``pipeline``): agent, seconds."""

        children: dict[str, HistogramInstrument] = {}

        def observe(agent: str, seconds: float) -> None:
            child = children.get(agent)
            if child is None:
                child = children[agent] = self.llm_call_duration.labels(agent, path)
            child.observe(seconds)

        return observe

    def observe_step(self, outcome: str, seconds: float) -> None:
        """The step coordinator callback: a step's pipeline ended ``done`` or ``failed``."""
        self.steps.labels(outcome).inc()
        self.step_duration.observe(seconds)

    def watch(
        self,
        gateways: Mapping[str, LLMGateway],
        scorer: Scorer,
        store: RubricStore,
        coordinator: StepCoordinator,
        ledger: TokenLedger,
        canary: Mapping[str, int] | None = None,
        fidelity: FidelityMonitor | None = None,
    ) -> None:
        """Export these objects' counters at scrape time (replacing earlier ones).

        ``canary``: the rubric canary's counts of the step flows this process runs;
        ``fidelity``: the audits of those step flows."""
        if self._state is not None:
            self.registry.unregister(self._state)
        self._state = _StateCollector(
            gateways, scorer, store, coordinator, ledger, {} if canary is None else canary
        )
        self._state.fidelity = fidelity or FidelityMonitor()
        self.registry.register(self._state)

    def watch_judge_canaries(self, counts: Mapping[str, int], rules: PrecheckRuleStore) -> None:
        """Export the judge canaries' counts (``probes.<kind>``, ``alarms.<kind>``) and the
        learned pre-check rules in force, at scrape time."""
        if self._judge_canaries is not None:
            self.registry.unregister(self._judge_canaries)
        self._judge_canaries = _JudgeCanaryCollector(counts, rules)
        self.registry.register(self._judge_canaries)

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format (:data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)


_LLM_COUNTERS = {
    "calls": ("amaris_llm_calls", "Successful LLM requests, by agent and path."),
    "errors": ("amaris_llm_errors", "Failed LLM request attempts, by agent and path."),
    "invalid_output": (
        "amaris_llm_invalid_output",
        "LLM answers that did not validate, by agent and path.",
    ),
    "repaired_json": (
        "amaris_llm_repaired_json",
        "LLM answers whose JSON had to be repaired, by agent and path.",
    ),
    "oversize": (
        "amaris_llm_oversize",
        "LLM answers abandoned past agents.<agent>.max_response_bytes, by agent and path.",
    ),
}


class _JudgeCanaryCollector(Collector):
    """The judge canaries' counters and the learned rules in force."""

    def __init__(self, counts: Mapping[str, int], rules: PrecheckRuleStore) -> None:
        self._counts = counts
        self._rules = rules

    def collect(self) -> Iterable[Metric]:
        counts = dict(self._counts)
        kinds = sorted({*JUDGE_CANARY_KINDS, *(k.split(".", 1)[1] for k in counts)})
        for what, text in (
            ("probes", "Judge canary probes the training judge scored, by kind."),
            ("alarms", "Judge canary alarms (the training judge paid a probe), by kind."),
        ):
            yield counted(f"amaris_judge_canary_{what}", text, "kind", kinds, counts, f"{what}.")
        yield GaugeMetricFamily(
            "amaris_precheck_learned_rules",
            "Learned pre-check rules in force (GET /precheck/rules).",
            value=len(self._rules.index()),
        )
        yield GaugeMetricFamily(
            "amaris_precheck_rules_version",
            "Version of the learned pre-check rule set (0: none ever learned).",
            value=self._rules.version,
        )


class _StateCollector(Collector):
    """Reads the services' own counters when Prometheus scrapes."""

    def __init__(
        self,
        gateways: Mapping[str, LLMGateway],
        scorer: Scorer,
        store: RubricStore,
        coordinator: StepCoordinator,
        ledger: TokenLedger,
        canary: Mapping[str, int],
    ) -> None:
        self._canary = canary
        self.fidelity = FidelityMonitor()
        self._gateways = dict(gateways)
        self._ledger = ledger
        # The gateways share one (each counted once).
        self._rates = list({id(g.rate_limits): g.rate_limits for g in gateways.values()}.values())
        self._scorer = scorer
        self._store = store
        self._coordinator = coordinator

    def collect(self) -> Iterable[Metric]:
        yield from self._llm()
        yield from self._fidelity()
        yield from self._ledger_metrics()
        yield from _rate_limit_metrics(self._rates)
        # dict(...) copies in one step: the pipeline thread updates its gateway's stats.
        counters = dict(self._scorer.counters)
        yield counted(
            "amaris_rewards",
            "Rollouts answered once stored in the rollout log, by status: scored by the "
            "judge, from the cache, given the pre-check's floor (degenerate), unscored.",
            "status",
            REWARD_STATUSES,
            counters,
        )
        yield CounterMetricFamily(
            "amaris_rollouts_unstored",
            "Rollouts refused with 503 because a durable write failed (full disk, locked "
            "database): judged, not stored, not counted in amaris_rewards.",
            value=counters.get("unstored", 0),
        )
        reasons = {
            *UNSCORED_REASONS,
            *(k.split(".", 1)[1] for k in counters if k.startswith("unscored.")),
        }
        yield counted(
            "amaris_unscored",
            "Unscored rollouts answered, by reason.",
            "reason",
            sorted(reasons),
            counters,
            "unscored.",
        )
        yield counted(
            "amaris_rollouts_truncated",
            "Rollouts answered that were judged with their text cut (head and tail kept), by "
            "cause: over scoring.max_field_chars, or over the scorer's context window.",
            "cause",
            TRUNCATION_CAUSES,
            counters,
            "truncated.",
        )
        yield from group_metrics(counters, groups.bias if (groups := self._scorer.groups) else None)
        yield from cascade_metrics(self._scorer)
        version = GaugeMetricFamily(
            "amaris_rubric_version", "Version of the rubric in force.", labels=["scope"]
        )
        version.add_metric(["global"], self._store.current().version)
        yield version
        yield CounterMetricFamily(
            "amaris_rollouts_late",
            "Rollouts that arrived after their step was completed: logged, not analysed.",
            value=self._coordinator.late,
        )
        known: list[str] = list(self._coordinator.snapshot().values())
        steps = GaugeMetricFamily(
            "amaris_step_status", "Steps this process knows, by status.", labels=["status"]
        )
        for status in sorted({*STEP_STATUSES, *known}):
            steps.add_metric([status], known.count(status))
        yield steps
        canary = dict(self._canary)
        yield counted(
            "amaris_rubric_canary",
            "Candidate rubrics the rubric canary checked, by outcome (refused: the update was "
            "rejected), in the step flows this process ran.",
            "outcome",
            CANARY_OUTCOMES,
            canary,
        )
        yield CounterMetricFamily(
            "amaris_rubric_canary_probes",
            "Probes the rubric canary scored under candidate rubrics.",
            value=canary.get("probes", 0),
        )
        yield GaugeMetricFamily(
            "amaris_step_waiters",
            "Requests waiting for a step's pipeline (/rubric_status/wait, sync-mode /score).",
            value=self._coordinator.waiters,
        )

    def _fidelity(self) -> Iterable[Metric]:
        monitor = self.fidelity
        # No audit yet (or the auditor off): no sample, rather than a made-up value.
        if monitor.agreement is not None:
            yield GaugeMetricFamily(
                "amaris_audit_agreement",
                "Kendall's tau between training and audit rewards on the latest audited step.",
                value=monitor.agreement,
            )
        if monitor.gap is not None:
            yield GaugeMetricFamily(
                "amaris_audit_reward_gap",
                "Mean absolute gap between training and audit rewards, latest audited step.",
                value=monitor.gap,
            )
        yield CounterMetricFamily(
            "amaris_fidelity_alarms",
            "Goodhart alarms raised: training and audit rewards diverge (docs/fidelity.md).",
            value=monitor.alarms,
        )

    def _llm(self) -> Iterable[Metric]:
        families = {
            kind: CounterMetricFamily(name, text, labels=["agent", "path"])
            for kind, (name, text) in _LLM_COUNTERS.items()
        }
        for path, gateway in self._gateways.items():
            stats = dict(gateway.stats)
            agents = {*AGENTS, *(key.rsplit(".", 1)[0] for key in stats)}
            for agent in sorted(agents):
                for kind, family in families.items():
                    family.add_metric([agent, path], stats.get(f"{agent}.{kind}", 0))
        yield from families.values()

    def _ledger_metrics(self) -> Iterable[Metric]:
        labels = ["agent", "model"]
        calls = CounterMetricFamily(
            "amaris_llm_model_calls", "LLM requests answered, by agent and model.", labels=labels
        )
        failed = CounterMetricFamily(
            "amaris_llm_model_failed",
            "LLM requests that got no answer (error, timeout, refused format), by agent and model.",
            labels=labels,
        )
        tokens = CounterMetricFamily(
            "amaris_llm_tokens",
            "LLM tokens the endpoint reported, by agent, model and kind (prompt, completion, "
            "reasoning: part of completion, cached: part of prompt).",
            labels=[*labels, "kind"],
        )
        seconds = CounterMetricFamily(
            "amaris_llm_wait_seconds",
            "Seconds spent waiting on the LLM endpoint (answered and failed requests), by "
            "agent and model.",
            labels=labels,
        )
        cost = CounterMetricFamily(
            "amaris_llm_cost_dollars",
            "Dollars of the LLM tokens at the configured prices (agents.<agent>.price, else "
            "pricing.<model>), by agent and model (those with a price only).",
            labels=labels,
        )
        by_agent: dict[str, float] = {}
        for (agent, model), usage in sorted(self._ledger.totals().items()):
            calls.add_metric([agent, model], usage.calls)
            failed.add_metric([agent, model], usage.failed)
            for kind in ("prompt", "completion", "reasoning", "cached"):
                tokens.add_metric([agent, model, kind], getattr(usage, f"{kind}_tokens"))
            seconds.add_metric([agent, model], usage.seconds)
            if usage.priced:
                cost.add_metric([agent, model], usage.cost_usd)
                by_agent[agent] = by_agent.get(agent, 0.0) + usage.cost_usd
        usd = CounterMetricFamily(
            "amaris_llm_cost_usd",
            "Dollars of the LLM tokens at the configured prices (agents.<agent>.price, else "
            "pricing.<model>), by agent (those with a price only).",
            labels=["agent"],
        )
        for agent, spent in sorted(by_agent.items()):
            usd.add_metric([agent], spent)
        yield from (calls, failed, tokens, seconds, cost, usd)


def _rate_limit_metrics(rates: Iterable[RateLimits]) -> Iterable[Metric]:
    """Time LLM requests waited for their endpoint's rate limits, and those waiting now."""
    waited: dict[tuple[str, str], float] = {}
    waiting: dict[str, int] = {}
    for limits in rates:
        for key, seconds in limits.waited().items():
            waited[key] = waited.get(key, 0.0) + seconds
        for agent, count in limits.waiting().items():
            waiting[agent] = waiting.get(agent, 0) + count
    family = CounterMetricFamily(
        "amaris_llm_rate_limit_wait_seconds",
        "Seconds LLM requests waited for their endpoint's rate limit, by agent and kind "
        "(requests, tokens: client.<agent>.requests_per_minute / tokens_per_minute or what the "
        "endpoint's headers set; endpoint: its retry-after or reset).",
        labels=["agent", "kind"],
    )
    agents = sorted({*AGENTS, *(agent for agent, _ in waited), *waiting})
    for agent in agents:
        for kind in KINDS:
            family.add_metric([agent, kind], waited.get((agent, kind), 0.0))
    yield family
    gauge = GaugeMetricFamily(
        "amaris_llm_rate_limit_waiting",
        "LLM requests waiting for their endpoint's rate limit now, by agent.",
        labels=["agent"],
    )
    for agent in agents:
        gauge.add_metric([agent], waiting.get(agent, 0))
    yield gauge
