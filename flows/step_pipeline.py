"""The step flow: one Prefect flow run per training step, named ``step-<N>``."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from prefect import flow
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from amaris.pipeline.context import get_context
from amaris.rubric import RubricVersion
from flows.artifacts import hacking_table, rubric_diff_markdown, summary_markdown
from tasks._common import criteria_payload
from tasks.analyze import analyze_rollout
from tasks.generate_queries import generate_queries
from tasks.load_rollouts import load_step_rollouts
from tasks.meta_summarize import meta_summarize
from tasks.publish_rubric import publish_update
from tasks.remember import remember
from tasks.retrieve_memory import retrieve_memory
from tasks.summarize import summarize_chunk
from tasks.update_rubric import propose_update


def is_update_step(step: int, frequency: int | None) -> bool:
    """Rubric updates run at steps 0, N, 2N, ... (every step when N is 1 or null)."""
    return not frequency or frequency <= 1 or step % frequency == 0


def _group_peers(records: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """For each record, the other rollouts answering the same prompt (its group)."""
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        rollout = record["rollout"]
        key = rollout.get("group_id") or rollout["input"]
        by_group[(record["scope"], key)].append(record)
    peers: dict[int, list[dict[str, Any]]] = {}
    for members in by_group.values():
        for record in members:
            peers[record["seq"]] = [
                {"id": m["rollout"]["id"], "output": m["rollout"]["output"][:1000],
                 "score": m.get("score")}
                for m in members if m is not record
            ][:16]
    return peers


@flow(name="amaris-step", flow_run_name="step-{step}", persist_result=True)
async def step_pipeline(step: int) -> dict[str, Any]:
    """Analyse, summarise, remember and (on update steps) evolve the rubric of ``step``.

    In ``per_instance`` mode every input seen in the step is processed as its own scope.
    Returns the outcome per scope.
    """
    ctx = get_context()
    retries = ctx.settings.pipeline.task_retries
    delays = ctx.settings.pipeline.task_retry_delays_seconds
    options = {"retries": retries, "retry_delay_seconds": delays, "retry_jitter_factor": 0.2}
    records = await load_step_rollouts(step)
    by_scope: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_scope[record["scope"]].append(record)
    results = await asyncio.gather(*(
        _process_scope(step, scope, scope_records, options)
        for scope, scope_records in sorted(by_scope.items())
    ))
    outcome = {"step": step, "rollouts": len(records), "scopes": dict(results)}
    # In the shared registry too: a replica that did not run this flow reads it there.
    await asyncio.to_thread(ctx.steps.set, step, scopes=outcome["scopes"])
    if any(r.get("outcome") == "published" for _, r in results):
        await asyncio.to_thread(ctx.rubrics.export)
    await hacking_table_artifact(step, outcome)
    return outcome


async def _process_scope(
    step: int, scope: str, records: list[dict[str, Any]], options: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    ctx = get_context()
    pipeline = ctx.settings.pipeline
    rubric = await asyncio.to_thread(ctx.rubrics.current, scope)
    criteria = criteria_payload(rubric)
    metadata = dict(records[-1].get("metadata") or {})
    peers = _group_peers(records)
    analyze = analyze_rollout.with_options(**options)
    # Setting up hundreds of task runs at once delays the first LLM calls by seconds
    # (measured: bench/step_pipeline.py) and stalls /score: keep about two waves live.
    limits = ctx.settings.concurrency
    live = asyncio.Semaphore(2 * (limits.analyzer or limits.total or 32))

    async def analyze_one(record: dict[str, Any]) -> dict[str, Any]:
        async with live:
            result: dict[str, Any] = await analyze(record, criteria, peers[record["seq"]])
            return result

    analyses = await asyncio.gather(*(analyze_one(record) for record in records))
    scored = [{**a, "score": r.get("score")} for a, r in zip(analyses, records, strict=True)]
    size = pipeline.chunk_size if pipeline.use_chunking else len(scored)
    chunks = [scored[i:i + size] for i in range(0, len(scored), size)] or [[]]
    summarize = summarize_chunk.with_options(**options)
    summaries = await asyncio.gather(*(
        summarize(step, scope, index, metadata, criteria, chunk)
        for index, chunk in enumerate(chunks)
    ))
    meta: dict[str, Any] | None = None
    if len(summaries) > 1:
        meta = await meta_summarize.with_options(**options)(
            step, scope, metadata, criteria, list(summaries))
    summary = meta or summaries[0]
    result: dict[str, Any] = {
        "rollouts": len(records),
        "base_version": rubric.version,
        "hacking": summary.get("aggregated_reward_hacking", {}).get("behaviours", []),
    }
    # Remembering this step (embedding included) and updating the rubric run side by
    # side: retrieval reads earlier steps only, so the update never waits for it.
    update = _update(step, scope, rubric, metadata, criteria, summary, options) \
        if is_update_step(step, pipeline.rubric_update_frequency) else _skip(rubric)
    _, _, outcome = await asyncio.gather(
        remember(step, scope, list(analyses), list(summaries), meta),
        acreate_markdown_artifact(
            key=f"summary-step-{step}-{_slug(scope)}",
            markdown=summary_markdown(step, scope, summary),
            description=f"Step {step} summary ({scope})"),
        update,
    )
    result.update(outcome)
    return scope, result


async def _skip(rubric: RubricVersion) -> dict[str, Any]:
    return {"outcome": "skipped", "reason": "not an update step", "version": rubric.version}


async def _update(
    step: int, scope: str, rubric: RubricVersion, metadata: dict[str, Any],
    criteria: list[dict[str, Any]], summary: dict[str, Any], options: dict[str, Any],
) -> dict[str, Any]:
    """Queries -> retrieval -> proposal -> guardrails and publication, plus the diff."""
    ctx = get_context()
    queries = await generate_queries.with_options(**options)(
        step, scope, metadata, criteria, summary)
    memory = await retrieve_memory(step, scope, queries)
    proposal = await propose_update.with_options(**options)(
        step, scope, rubric.version, metadata, criteria, summary, memory)
    outcome = await publish_update(step, scope, rubric.version, proposal)
    after = await asyncio.to_thread(ctx.rubrics.current, scope)
    await acreate_markdown_artifact(
        key=f"rubric-diff-step-{step}-{_slug(scope)}",
        markdown=rubric_diff_markdown(rubric, after, proposal, outcome),
        description=f"Step {step} rubric update ({scope})")
    return {**outcome, "strategy": proposal["update_strategy"]}


async def hacking_table_artifact(step: int, outcome: dict[str, Any]) -> None:
    """A table of the step's reward-hacking findings, across scopes."""
    rows = hacking_table(outcome)
    if rows:
        await acreate_table_artifact(key=f"hacking-step-{step}", table=rows,
                                    description=f"Step {step} reward-hacking findings")


def _slug(scope: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in scope.lower())[:40]
