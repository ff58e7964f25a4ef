"""``amaris check-judge``: probe every configured agent's endpoint before a training run.

Per agent: is its endpoint reachable, does it list the model (``GET /v1/models``), which
structured-output mode works (the gateway's own fallback, :mod:`amaris.llm.output_mode`,
decides it on a real request), what one sample scoring through the real
:class:`~amaris.scoring.scorer.Scorer` path gives (latency, tokens, reasoning seen, verdict
parsed), and the context window amaris will budget with. Agents that share an endpoint,
model and options share one probe; each probe judges the same obvious rollout against the
configured rubric with the scorer's prompt. Nothing is written to the data folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import openai

from amaris.agents.prompts import load_prompts
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, build_providers
from amaris.llm.ledger import total
from amaris.llm.output_mode import RequestFormat
from amaris.llm.providers import ChatProvider, Completion, Failure
from amaris.llm.reasoning import split_reasoning
from amaris.memory.qdrant import open_qdrant
from amaris.models import ScoreRequest
from amaris.rubric.model import adaptive_from_config, anchors_from_config
from amaris.rubric.store import RubricStore
from amaris.scoring.reward import reward_of
from amaris.scoring.scorer import Scorer
from amaris.settings import (
    AgentName,
    AgentOptions,
    ResolvedAgentOptions,
    Settings,
    secret_value,
)

SAMPLE = {
    "rollout": {
        "id": "check-judge",
        "input": "What is 6 * 7?",
        "output": "6 * 7 = 42. The answer is 42.",
        "supplemental_context": "Answer: 42",
    },
    "metadata": {"high_level_goal": "check the judge", "current_step": 0},
}
"""The rollout every probe scores: any working judge parses a verdict for it."""

COLUMNS = ("agent", "endpoint", "model", "reachable", "listed", "mode", "context", "sample")


@dataclass
class AgentCheck:
    """One row of the report."""

    agent: str
    endpoint: str
    model: str
    reachable: str = "-"
    listed: str = "-"
    mode: str = "-"
    context: str = "-"
    sample: str = "-"
    failures: list[str] = field(default_factory=list)

    def cells(self) -> tuple[str, ...]:
        """The row's cells, in :data:`COLUMNS` order."""
        return (
            self.agent,
            self.endpoint,
            self.model,
            self.reachable,
            self.listed,
            self.mode,
            self.context,
            self.sample,
        )


@dataclass
class _Sample:
    mode: str
    sample: str
    failure: str | None


class _Recorder:
    """The agent's provider, keeping the last completion (to see its reasoning)."""

    def __init__(self, inner: ChatProvider) -> None:
        self.inner = inner
        self.description = inner.description
        self.offline = inner.offline
        self.last: Completion | None = None

    async def complete(
        self,
        agent: str,
        messages: list[dict[str, str]],
        options: ResolvedAgentOptions,
        response_format: RequestFormat | None = None,
    ) -> Completion:
        self.last = await self.inner.complete(agent, messages, options, response_format)
        return self.last

    def failure(self, exc: BaseException) -> Failure:
        return self.inner.failure(exc)

    async def models(self, timeout: float) -> dict[str, int | None]:
        return await self.inner.models(timeout)

    async def close(self) -> None:
        await self.inner.close()


def as_scorer(settings: Settings, agent: AgentName) -> Settings:
    """``settings`` whose scorer has ``agent``'s endpoint and options."""
    options = AgentOptions(**settings.agent_options(agent).model_dump())
    return settings.model_copy(
        update={
            "agents": settings.agents.model_copy(update={"scorer": options}),
            "client": settings.client.model_copy(
                update={"scorer": settings.client.for_agent(agent)}
            ),
        }
    )


async def check_judges(settings: Settings) -> list[AgentCheck]:
    """One :class:`AgentCheck` per agent (its ``failures`` empty when all is well)."""
    providers = build_providers(settings)
    listings: dict[int, dict[str, int | None] | str] = {}
    samples: dict[str, _Sample] = {}
    rows: list[AgentCheck] = []
    try:
        for agent in settings.served_agents:
            provider = providers[agent]
            options = settings.agent_options(agent)
            if provider.offline:
                row = AgentCheck(
                    agent,
                    provider.description,
                    "offline-rules",
                    reachable="in process",
                    listed="-",
                    context="-",
                )
            else:
                row = AgentCheck(agent, provider.description, options.model)
                if id(provider) not in listings:
                    listings[id(provider)] = await _listing(provider, options.timeout)
                _read_listing(row, listings[id(provider)], options)
            if row.failures and row.reachable.startswith("no"):
                rows.append(row)
                continue
            client = settings.client.for_agent(agent)
            secret = secret_value(client.api_key)
            key = f"{client.base_url}\x00{secret}\x00{options.model_dump_json()}"
            if key not in samples:
                samples[key] = await _sample(as_scorer(settings, agent))
            found = samples[key]
            row.mode, row.sample = found.mode, found.sample
            if found.failure is not None:
                row.failures.append(found.failure)
            rows.append(row)
    finally:
        for provider in {id(p): p for p in providers.values()}.values():
            await provider.close()
    return rows


async def _listing(provider: ChatProvider, timeout: float) -> dict[str, int | None] | str:
    """The endpoint's models, or why they could not be listed (``unreachable: ...`` when
    nothing answered)."""
    try:
        return await provider.models(timeout)
    except (openai.APIConnectionError, TimeoutError) as exc:  # APITimeoutError included
        return f"unreachable: {type(exc).__name__}: {exc}"
    except openai.APIStatusError as exc:
        return f"HTTP {exc.status_code}: {_short(str(exc))}"


def _read_listing(
    row: AgentCheck, listing: dict[str, int | None] | str, options: ResolvedAgentOptions
) -> None:
    configured = options.context_window
    row.context = f"{configured} (configured)" if configured else "unknown"
    if isinstance(listing, str):
        if listing.startswith("unreachable"):
            row.reachable = "no"
            row.failures.append(f"{row.endpoint} {listing}")
            return
        row.reachable = "yes"
        row.listed = f"? ({listing.split(':')[0]})"
        if listing.startswith(("HTTP 401", "HTTP 403")):
            row.failures.append(f"listing models was refused: {listing}")
        return
    row.reachable = "yes"
    if options.model not in listing:
        row.listed = "no"
        shown = ", ".join(sorted(listing)[:5]) or "none"
        row.failures.append(f"model {options.model!r} is not listed (listed: {shown})")
        return
    row.listed = "yes"
    window = listing[options.model]
    if not configured and window is not None:
        row.context = f"{window} (max_model_len)"


async def _sample(settings: Settings) -> _Sample:
    """One scoring of :data:`SAMPLE` through the Scorer, as the scorer of ``settings``."""
    provider = _Recorder(build_providers(settings)["scorer"])
    gateway = LLMGateway(settings, {"scorer": provider}, CallLog(None))
    qdrant = open_qdrant(settings.memory, location=":memory:")
    try:
        store = RubricStore(qdrant, settings.memory.collection, None)
        adaptive = adaptive_from_config(settings.adaptive_rubrics)
        rubric = store.publish(
            anchors=anchors_from_config(settings.anchor_rubrics),
            adaptive=adaptive,
            origin="config",
            step=None,
            next_adaptive_id=len(adaptive) + 1,
            export=False,
        )
        scorer = Scorer(settings.scoring, gateway, store, load_prompts(settings.prompts)["scorer"])
        started = time.perf_counter()
        answer = await reward_of(scorer, ScoreRequest.model_validate(SAMPLE), rubric)
        elapsed_ms = (time.perf_counter() - started) * 1000
    finally:
        await gateway.close()
        qdrant.close()
    state = gateway.output_mode("scorer")
    mode = (
        state.mode
        if state.reason.startswith(("default", "offline"))
        else (f"{state.mode} ({state.reason.split(':')[0]})")
    )
    used = total(u for (agent, _), u in gateway.ledger.totals().items() if agent == "scorer")
    tokens = f"{used.prompt_tokens}+{used.completion_tokens} tok" + (
        f" ({used.reasoning_tokens} reasoning)" if used.reasoning_tokens else ""
    )
    last = provider.last
    reasoning = last is not None and (
        last.reasoning is not None or split_reasoning(last.content)[1] is not None
    )
    timing = f"{elapsed_ms:.0f} ms, {tokens}, reasoning {'seen' if reasoning else 'none'}"
    if answer.status != "scored":
        return _Sample(
            mode, f"unscored, {timing}", f"the sample was not scored: {_short(answer.reason or '')}"
        )
    return _Sample(mode, f"verdict parsed (reward {answer.score:.2f}), {timing}", None)


def render(rows: list[AgentCheck]) -> str:
    """The report: a table, then each failure on a line of its own naming its agent."""
    table = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    failures = [f"FAIL {row.agent}: {failure}" for row in rows for failure in row.failures]
    if any(row.endpoint.startswith("offline") for row in rows):
        lines.append("")
        lines.append(
            "offline agents use the built-in rule-based judge (NOT an LLM); set "
            "client.default.base_url to judge with a model"
        )
    if failures:
        lines.append("")
        lines.extend(failures)
    else:
        lines.append("")
        lines.append("all agents OK")
    return "\n".join(lines)


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
