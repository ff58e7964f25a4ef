"""The training loop both ``amaris simulate`` and ``amaris replay`` drive against a server.

Per step: read the rubric in force (``GET /rubrics``), get the step's rollouts from a
:class:`StepSource` (the simulated policy writes them under that rubric; a replay
re-sends recorded ones), score them (``POST /batch_score``), complete the step
(``POST /complete``), wait for its pipeline (``GET /rubric_status/wait``), and read
what the analyzer found in each rollout (``GET /steps/{step}/analyses``), the step's
audit (``GET /steps/{step}``) and what the step's LLM calls cost (the token ledger's
counters in ``GET /metrics``). At the end,
every rubric version and what changed from its parent (``/rubrics/history``,
``/rubrics/diff``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

import httpx

from amaris.client import RewardClient, WaitAnswer
from amaris.llm.ledger import Key, Usage
from amaris.models import ScoreRequest
from amaris.sim.answers import HealthJSON, RubricDiffJSON, RubricJSON
from amaris.sim.policy import PlannedRollout
from amaris.sim.progress import Progress
from amaris.sim.usage import difference, ledger_from_metrics
from amaris.trust.audit.models import AuditSummary

BATCH = 256
"""Rollouts per ``/batch_score`` request."""


def _score_item(planned: PlannedRollout) -> ScoreRequest:
    """A planned rollout as ``/batch_score`` takes it: its models, which the client sends
    with the fields they were given (a replayed trainer's own metadata keys too)."""
    return ScoreRequest(rollout=planned.rollout, metadata=planned.metadata)


@dataclass
class RolloutResult:
    """One scored rollout and what the step's analysis flagged in it."""

    rollout_id: str
    behaviour: str
    reward: float | None
    status: str
    rubric_version: int | None
    flags: list[str] = field(default_factory=list)
    analysed: bool = False
    prompt: str = ""
    """The rollout's input: rollouts with the same one in a step form a GRPO group."""
    judge: str | None = None
    """The judge that decided its reward (``cheap``, ``strong``; None: none did)."""


@dataclass
class StepResult:
    """One step: its rollouts, the rubric they were written under, the pipeline's answer."""

    step: int
    rubric_version: int
    rollouts: list[RolloutResult]
    outcome: WaitAnswer
    """The server's ``/rubric_status/wait`` answer for the step."""
    usage: dict[Key, Usage] = field(default_factory=dict)
    """The step's LLM requests (scoring and pipeline), by (agent, model)."""
    audit: AuditSummary | None = None
    """The audit judge's check of the step (``GET /steps/{step}``), when the auditor is on."""


@dataclass
class RunResult:
    """One run against one server."""

    label: str
    steps: list[StepResult]
    history: list[RubricJSON]
    """The server's ``/rubrics/history`` answer, as is (for the report)."""
    diffs: list[RubricDiffJSON]
    """Each version's ``/rubrics/diff`` from its parent, as the server answered it."""
    wall_s: float
    judge: str
    memory: dict[str, int]
    """``static_memory_steps`` / ``dynamic_memory_limit_per_query`` of the run, when known."""


class StepSource(Protocol):
    """Where a run's rollouts come from."""

    def steps(self) -> Sequence[int]:
        """The steps to run, in order."""
        ...

    def rollouts(self, step: int, rubric: RubricJSON) -> list[PlannedRollout]:
        """The rollouts of ``step``, written under ``rubric`` (a ``GET /rubrics`` answer)."""
        ...

    def observe(self, result: StepResult) -> None:
        """Learn from a finished step (the simulated policy drifts)."""
        ...


class DriverError(RuntimeError):
    """The server refused or failed a step."""


class TaggedBehaviour(TypedDict):
    """A behaviour an analysis found (``reward_hacking_analysis.behaviours``)."""

    tag: str


class HackingAnalysis(TypedDict, total=False):
    """``reward_hacking_analysis`` of an analysis."""

    behaviours: list[TaggedBehaviour]


class AnalysisJSON(TypedDict, total=False):
    """What the simulator reads of a rollout's analysis (``GET /steps/{step}/analyses``:
    the analyzer's reply as stored, :class:`amaris.agents.schemas.IndividualAnalysis`)."""

    reward_hacking_analysis: HackingAnalysis


def flags_of(analysis: AnalysisJSON) -> list[str]:
    """The reward-hacking tags an analysis names, in its order, without repeats."""
    behaviours = analysis.get("reward_hacking_analysis", {}).get("behaviours", [])
    return list(dict.fromkeys(str(b["tag"]) for b in behaviours))


async def _get(http: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await http.get(path, params=params or None)
    if response.status_code != 200:
        raise DriverError(f"GET {path}: HTTP {response.status_code}: {response.text[:300]}")
    return response.json()


async def _ledger(http: httpx.AsyncClient) -> dict[Key, Usage]:
    response = await http.get("/metrics")
    if response.status_code != 200:
        raise DriverError(f"GET /metrics: HTTP {response.status_code}: {response.text[:300]}")
    return ledger_from_metrics(response.text)


async def run(
    url: str,
    source: StepSource,
    *,
    label: str,
    api_key: str | None = None,
    step_timeout: float = 1800.0,
    progress: Progress | None = None,
) -> RunResult:
    """Drive every step of ``source`` through the server at ``url``.

    Raises:
        DriverError: a step's pipeline failed or an endpoint answered an error.
        amaris.client.AmarisError: scoring failed (unreachable, invalid request).
    """
    started = time.monotonic()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    steps = list(source.steps())
    results: list[StepResult] = []
    async with (
        RewardClient(url, timeout=step_timeout, api_key=api_key) as client,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=step_timeout) as http,
    ):
        health: HealthJSON = await _get(http, "/healthz")
        for done, step in enumerate(steps):
            rubric: RubricJSON = await _get(http, "/rubrics")
            before = await _ledger(http)
            planned = source.rollouts(step, rubric)
            scored = []
            for start in range(0, len(planned), BATCH):
                items = [_score_item(p) for p in planned[start : start + BATCH]]
                scored += await client.batch_score_async(items)
            if await client.rollouts_complete_async(step) == "noop":
                raise DriverError(
                    "the server completes steps by itself "
                    "(pipeline.rollouts_per_step is set); the simulator needs "
                    "pipeline.rollouts_per_step: null and pipeline.mode: async"
                )
            answer = await client.rubric_updated_async(step, timeout=step_timeout)
            analyses = await _get(http, f"/steps/{step}/analyses")
            found: dict[str, AnalysisJSON] = {
                a["rollout_id"]: a["analysis"] for a in analyses["analyses"]
            }
            usage = difference(await _ledger(http), before)
            detail = await _get(http, f"/steps/{step}")
            audit = detail.get("audit")
            rollouts = [
                RolloutResult(
                    rollout_id=p.rollout.id,
                    behaviour=p.behaviour,
                    reward=r.score if r.status == "scored" else None,
                    status=r.status,
                    rubric_version=r.rubric_version,
                    flags=flags_of(found.get(p.rollout.id, {})),
                    analysed=p.rollout.id in found,
                    prompt=p.rollout.input,
                    judge=r.judge,
                )
                for p, r in zip(planned, scored, strict=True)
            ]
            result = StepResult(
                step,
                int(rubric["version"]),
                rollouts,
                answer,
                usage,
                AuditSummary.model_validate(audit) if audit else None,
            )
            results.append(result)
            source.observe(result)
            if progress is not None:
                rewards = [r.reward for r in rollouts if r.reward is not None]
                mean = f"{sum(rewards) / len(rewards):.2f}" if rewards else "-"
                progress.update(
                    done + 1, f"step {step}: mean reward {mean}, rubric v{rubric['version']}"
                )
        history: list[RubricJSON] = await _get(http, "/rubrics/history")
        diffs: list[RubricDiffJSON] = [
            await _get(http, "/rubrics/diff", a=v["parent"], b=v["version"])
            for v in history
            if v.get("parent") is not None
        ]
    return RunResult(
        label=label,
        steps=results,
        history=history,
        diffs=diffs,
        wall_s=time.monotonic() - started,
        judge=str(health.get("judge_backend")),
        memory={},
    )
