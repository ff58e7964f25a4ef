"""A step's scopes through their stages: each scope alone (global mode), or batched into
task runs (per_instance mode).

A task run per scope and stage made a per_instance step's task runs, Prefect's database
and its shutdown grow with the step's prompts; a batch of whole scopes, of at most
``pipeline.chunk_size`` rollouts, is one task run whose scopes run their stages inline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import TypeVar, cast

from prefect import task
from prefect.artifacts import acreate_markdown_artifact
from pydantic import BaseModel, ConfigDict

from amaris.memory.records import RolloutRecord
from amaris.rubric.informativeness import ScopeStats
from amaris.settings import AgentName
from amaris.steps.context import get_context
from amaris.steps.outcomes import ScopeOutcome
from amaris.text.markdown import inert
from amaris.trust.audit.models import AlarmEvidence
from flows.scope import ScopeRun
from tasks._common import unwalked, work_key
from tasks.analyze import forget_analyses
from tasks.publish_rubric import record_versions

T = TypeVar("T")


class ScopeWork(BaseModel):
    """One scope of a step: its rollouts, its criteria's statistics, its alarm evidence."""

    model_config = ConfigDict(frozen=True)

    scope: str
    records: list[RolloutRecord]
    history: list[ScopeStats | None]
    alarm: AlarmEvidence | None = None


BATCH_AGENTS: tuple[AgentName, ...] = (
    "analyzer",
    "summarizer",
    "meta_summarizer",
    "query_generator",
    "updater",
)
"""The agents a batch asks: their prompts and models are in its cache key."""


async def process_scope(
    step: int, work: ScopeWork, inline: bool = False
) -> tuple[ScopeRun, ScopeOutcome]:
    """One scope of the step: load → analyze (each chunk summarised as it is in) →
    consolidate → query → retrieve → update → canary/publish, and remember beside the
    update (after retrieval: it reads earlier steps only, so the update never waits)."""
    run = await ScopeRun.load(step, work.scope, work.records, work.history)
    run.alarm = work.alarm
    run.inline = inline
    analyses, summaries = await run.analyze()
    meta = await run.consolidate(summaries) if len(summaries) > 1 else None
    summary = meta if len(summaries) > 1 else (summaries[0] if summaries else None)
    update, _, _ = await asyncio.gather(
        run.update(summary, len(summaries), analyses),
        run.remember(analyses, summaries, meta),
        run.report(summary),
    )
    return run, run.outcome(summary, update)


def scope_batches(works: Sequence[ScopeWork], size: int) -> list[list[ScopeWork]]:
    """``works`` in order, grouped so that a group's rollouts number at most ``size`` (a
    larger scope is a group alone)."""
    batches: list[list[ScopeWork]] = []
    rollouts = 0
    for work in works:
        if not batches or rollouts + len(work.records) > size:
            batches.append([])
            rollouts = 0
        batches[-1].append(work)
        rollouts += len(work.records)
    return batches


# Cached: a re-run of a failed step reuses the outcomes of the batches that had ended
# (the key holds their rollouts, with the verdicts and rubric versions they were scored under).
@task(
    name="scopes",
    cache_key_fn=work_key("scopes", BATCH_AGENTS),
    persist_result=True,
    task_run_name="scopes-{index}",
)
async def process_scopes(
    step: int, index: int, works: list[ScopeWork]
) -> list[tuple[str, ScopeOutcome]]:
    """The scopes of one batch, their stages inline, concurrently (the gateway bounds
    the calls); one artifact for the batch: a line per scope, and the summaries and
    rubric diffs worth reading."""
    done = await asyncio.gather(*(process_scope(step, work, inline=True) for work in works))
    published = {run.scope: o.version for run, o in done if o.outcome == "published"}
    await asyncio.to_thread(record_versions, step, published)
    analysed = [key for run, _ in done for key in run.analysed]
    await asyncio.to_thread(forget_analyses, get_context().settings.memory.path, analysed)
    await acreate_markdown_artifact(
        key=f"scopes-step-{step}-{index}",
        markdown=batch_markdown(step, index, [(run, outcome) for run, outcome in done]),
        description=f"Step {step} scopes, batch {index}",
    )
    return [(run.scope, outcome) for run, outcome in done]


def batch_markdown(step: int, index: int, done: list[tuple[ScopeRun, ScopeOutcome]]) -> str:
    """A line per scope of the batch, then the scopes' notes."""
    lines = [f"# Step {step} scopes, batch {index}", "", "| scope | rollouts | outcome | reason |"]
    lines.append("|---|---|---|---|")
    for run, outcome in done:
        reason = inert((outcome.reason or "")[:200])
        lines.append(f"| {inert(run.scope)} | {outcome.rollouts} | {outcome.outcome} | {reason} |")
    for run, _ in done:
        lines += ["", *run.notes] if run.notes else []
    return "\n".join(lines)


async def process_all(
    step: int,
    works: Sequence[ScopeWork],
    batched: bool,
    afterwards: list[Callable[[], Awaitable[None]]],
) -> list[tuple[str, ScopeOutcome]]:
    """Every scope of the step: a batch task run per ``pipeline.chunk_size`` rollouts when
    ``batched``, else each scope with its stages as task runs of their own, whose record
    in Prefect (:attr:`ScopeRun.afterwards`) joins ``afterwards``."""
    if not batched:
        done = await all_ended([process_scope(step, work) for work in works])
        afterwards.extend(write for run, _ in done for write in run.afterwards)
        return [(run.scope, outcome) for run, outcome in done]
    size = get_context().settings.pipeline.chunk_size
    batches = scope_batches(works, size)
    found = await all_ended(
        [process_scopes(step, i, unwalked(batch)) for i, batch in enumerate(batches)]
    )
    return [pair for batch in found for pair in batch]


async def all_ended(runs: Sequence[Coroutine[object, object, T]]) -> list[T]:
    """Every one of ``runs`` to its end, then the first failure raised: a failed step leaves
    no scope running on past it, and its re-run reuses every scope that ended."""
    ended = await asyncio.gather(*runs, return_exceptions=True)
    for result in ended:
        if isinstance(result, BaseException):
            raise result
    return cast(list[T], ended)


def by_scope(records: Sequence[RolloutRecord]) -> Mapping[str, list[RolloutRecord]]:
    """``records`` by scope, scopes in order."""
    grouped: dict[str, list[RolloutRecord]] = {}
    for record in records:
        grouped.setdefault(record.scope, []).append(record)
    return dict(sorted(grouped.items()))
