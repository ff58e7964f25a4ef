"""Markdown and tables attached to step runs (rubric diff, summary, hacking findings,
per-criterion informativeness, token usage, run manifest), and the writers that attach
them.

Every string an LLM, the trainer or the policy wrote (rollout ids, tags, criterion texts,
summaries, rationales, reasons) goes in through :func:`~amaris.text.markdown.inert`:
Prefect's UI renders these artifacts, and the string cells of a table, as Markdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

from amaris.agents.schemas import BatchSummary, RubricUpdateProposal
from amaris.llm.ledger import Key, Usage, cost, total, unpriced
from amaris.manifest import markdown as manifest_markdown
from amaris.rubric.informativeness import DueCriterion, ScopeStats
from amaris.rubric.model import RubricVersion
from amaris.settings import ModelPrice
from amaris.steps.context import get_context
from amaris.steps.outcomes import Dropped, ScopeOutcome, UpdateOutcome
from amaris.text.markdown import inert
from amaris.trust.audit.history import audit_history
from amaris.trust.audit.models import StepAudit
from amaris.trust.audit.report import fidelity_markdown

log = logging.getLogger("amaris.pipeline")

TableRow = dict[str, str | int | float | bool | None]
"""A row of a table artifact: its cells by column."""


def rubric_diff_markdown(
    before: RubricVersion,
    after: RubricVersion,
    proposal: RubricUpdateProposal | None,
    outcome: UpdateOutcome,
    due: Sequence[DueCriterion] = (),
    scope: str | None = None,
) -> str:
    """Human-readable diff of the adaptive rubric, with the strategy and rationale, and
    the criteria due to be retired or reworded as uninformative, with their evidence;
    with ``scope``, a section of a longer document headed by it."""
    old = {c.id: c for c in before.adaptive}
    new = {c.id: c for c in after.adaptive}
    head = "# Rubric update" if scope is None else f"## {inert(scope)}: rubric update"
    lines = [
        f"{head}: version {before.version} -> {after.version}",
        "",
        f"**Outcome:** {outcome.outcome}"
        + (f" ({inert(outcome.reason)})" if outcome.reason else ""),
        f"**Strategy:** {proposal.update_strategy if proposal else None}",
        "",
        f"**Rationale:** {inert(proposal.rationale.summary) if proposal else ''}",
        "",
        "| change | id | weight | criterion | rests on |",
        "|---|---|---|---|---|",
    ]
    for cid, c in new.items():
        cites = ", ".join(inert(f) for f in c.findings)
        if cid not in old:
            lines.append(f"| added | {inert(cid)} | {c.weight:+.2f} | {inert(c.text)} | {cites} |")
        elif old[cid] != c:
            lines.append(
                f"| changed | {inert(cid)} | {old[cid].weight:+.2f} -> {c.weight:+.2f} | "
                f"{inert(old[cid].text)} -> {inert(c.text)} | {cites} |"
            )
    for cid, c in old.items():
        if cid not in new:
            lines.append(f"| retired | {inert(cid)} | {c.weight:+.2f} | {inert(c.text)} | |")
    if len(lines) == 10:
        lines.append("| (none) | | | | |")
    if due:
        lines += [
            "",
            "## Uninformative criteria",
            "",
            "Saturated or with zero spread for `rubric.retire_uninformative_after` "
            "consecutive steps: retired unless the update rewords them.",
            "",
            "| id | what happened | evidence |",
            "|---|---|---|",
        ]
        for item in due:
            if item.criterion_id not in new:
                done = "retired"
            elif new[item.criterion_id].text != item.text:
                done = "reworded"
            else:
                done = "kept (no room for the change, or the update was not published)"
            lines.append(f"| {inert(item.criterion_id)} | {done} | {inert(item.evidence)} |")
    return "\n".join(lines)


def criteria_table(scopes: Sequence[ScopeStats]) -> list[TableRow]:
    """Rows ``scope, id, anchor, verdicts, mean, variance, extremes, zero-spread groups,
    reward r, uninformative`` for every criterion of a step, per scope."""

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    rows: list[TableRow] = []
    for scope_stats in scopes:
        for c in scope_stats.criteria:
            flags = [
                name
                for name, on in (("saturated", c.saturated), ("zero spread", c.zero_spread))
                if on
            ]
            rows.append(
                {
                    "scope": inert(scope_stats.scope),
                    "criterion": inert(c.id),
                    "anchor": c.is_anchor,
                    "verdicts": c.verdicts,
                    "mean": round(c.mean, 3),
                    "variance": round(c.variance, 3),
                    "at extremes": share(c.extreme_share),
                    "zero-spread groups": (
                        f"{share(c.zero_spread_group_share)} of {c.groups}" if c.groups else "-"
                    ),
                    "reward r": (
                        "-" if c.reward_correlation is None else round(c.reward_correlation, 3)
                    ),
                    "uninformative": ", ".join(flags) if c.uninformative else "",
                }
            )
    return rows


def summary_markdown(
    step: int,
    scope: str,
    summary: BatchSummary | None,
    dropped: list[Dropped] | None = None,
    level: int = 1,
) -> str:
    """The step summary as markdown, and the outputs the step went on without; its
    heading at ``level``."""
    lines = [f"{'#' * level} Step {step} summary ({inert(scope)})", ""]
    if summary is None:
        lines += ["**No summary:** every summary of this step was dropped (below)."]
    else:
        lines += [inert(summary.executive_summary.summary), "", "## Reward hacking"]
        lines += [
            f"- **{inert(b.tag)}**: {b.count} rollouts ({b.share:.0%}) {inert(b.description)}"
            for b in summary.aggregated_reward_hacking.behaviours
        ] or ["- none detected"]
        lines += ["", "## Recommendations"]
        recommendations = summary.rubric_evolution_plan.recommendations
        lines += [f"- {inert(r)}" for r in recommendations] or ["- none"]
    if dropped:
        lines += [
            "",
            f"## Dropped outputs ({len(dropped)})",
            "",
            "An agent's output that stayed invalid after the re-ask, was cut by "
            "`max_tokens` or overflowed its context: the step went on without it.",
            "",
            "| agent | part | reason |",
            "|---|---|---|",
        ]
        lines += [f"| {inert(d.agent)} | {inert(d.part)} | {inert(d.reason)} |" for d in dropped]
    return "\n".join(lines)


def hacking_table(scopes: Mapping[str, ScopeOutcome]) -> list[TableRow]:
    """Rows ``scope, tag, count, share, examples`` for every scope of a step's outcome."""
    rows: list[TableRow] = []
    for scope, result in scopes.items():
        for b in result.hacking:
            rows.append(
                {
                    "scope": inert(scope),
                    "tag": inert(b.tag),
                    "count": b.count,
                    "share": round(b.share, 3),
                    "examples": ", ".join(inert(r) for r in b.rollout_ids[:5]),
                }
            )
    return rows


def usage_line(table: Mapping[Key, Usage], waited: float, failed: bool = False) -> str:
    """One line: how long the step waited on the judge, its requests and their failures."""
    u = total(table.values())
    return (
        f"waited {waited:.1f} s on the judge{' before it failed' if failed else ''}"
        f" ({u.calls + u.failed} requests, {u.seconds:.1f} s waited on endpoints; "
        f"{u.failed} failed, {u.timed_out} of them timed out)"
    )


def usage_markdown(
    step: int,
    rollouts: int | None,
    table: Mapping[Key, Usage],
    pricing: Mapping[str, ModelPrice],
    waited: float = 0.0,
    failed: bool = False,
) -> str:
    """The LLM requests, tokens, endpoint time and cost of a step, by agent and model, under
    the time the step waited on the judge (``waited``: wall time with one of its pipeline's
    calls outstanding); with prices (each request's, as the ledger recorded it at its
    agent's price, else ``pricing``), the step's cost and its cost per 1,000 rollouts."""
    lines = [
        f"# Step {step}: LLM tokens and time",
        "",
        f"**{usage_line(table, waited, failed)}**",
        "",
        "Waited on the judge: wall time during which at least one of the step "
        "pipeline's calls was outstanding (queueing for a concurrency slot and retries "
        "included). Seconds waited: each request's time on its endpoint, summed "
        "(concurrent requests each count; the scorer's requests of the step included).",
        "",
        "| agent | model | calls | failed | timed out | prompt | cached | completion "
        "| reasoning | seconds waited | cost ($) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(key, u, cost({key: u}, pricing)) for key, u in sorted(table.items())]
    rows.append((("all", ""), total(table.values()), cost(table, pricing)))
    for (agent, model), u, spent in rows:
        lines.append(
            f"| {agent} | {model} | {u.calls} | {u.failed} | {u.timed_out} | "
            f"{u.prompt_tokens} | {u.cached_tokens} | {u.completion_tokens} | "
            f"{u.reasoning_tokens} | {u.seconds:.1f} | {'-' if spent is None else f'{spent:.4f}'} |"
        )
    if not table:
        lines.append("")
        lines.append(
            "No LLM request of this step was made in this process (a cached re-run, "
            "or the rollouts were scored by another process)."
        )
    dollars = cost(table, pricing)
    if dollars is not None or pricing or any(u.priced for u in table.values()):
        lines.append("")
        if dollars is None:
            lines.append(
                "**Cost:** unknown: no price for "
                + ", ".join(f"`{m}`" for m in unpriced(table, pricing))
                + " (set `agents.<agent>.price` or `pricing.<model>`)."
            )
        else:
            per_1000 = f"${dollars / rollouts * 1000:.4f}" if rollouts else "-"
            of = f"{rollouts} rollouts" if rollouts is not None else "the step"
            lines.append(f"**Cost:** ${dollars:.4f} for {of} ({per_1000} per 1,000 rollouts).")
    return "\n".join(lines)


async def usage_artifact(step: int, rollouts: int | None, failed: bool = False) -> None:
    """The step's LLM accounting from the ledger, on success or failure: a log line (the
    time it waited on the judge, its requests, failures and timeouts) and an artifact (the
    same, with tokens, time and cost by agent and model)."""
    ctx = get_context()
    ledger = ctx.gateway.ledger
    table, waited = ledger.for_step(step), ledger.waited(step)
    log.info("step %s: %s", step, usage_line(table, waited, failed))
    await acreate_markdown_artifact(
        key=f"usage-step-{step}",
        markdown=usage_markdown(step, rollouts, table, ctx.settings.pricing, waited, failed),
        description=f"Step {step} LLM tokens, time waited on the judge and cost",
    )


async def audit_artifact(step: int, audit: StepAudit) -> None:
    """The step's reward fidelity: its audit, the criteria read differently, the trend."""
    history = await asyncio.to_thread(audit_history, get_context().steps, step)
    await acreate_markdown_artifact(
        key=f"fidelity-step-{step}",
        markdown=fidelity_markdown(audit, history),
        description=f"Step {step} reward fidelity (audit judge)",
    )


async def criteria_table_artifact(step: int, measured: dict[str, list[ScopeStats | None]]) -> None:
    """A table of the step's per-criterion informativeness, across scopes."""
    rows = criteria_table([h[0] for h in measured.values() if h and h[0] is not None])
    if rows:
        await acreate_table_artifact(
            key=f"criteria-step-{step}",
            table=rows,
            description=f"Step {step} per-criterion informativeness",
        )


async def manifest_artifact(step: int) -> None:
    """The run manifest the step ran under (config hash, versions, models, prompts), under
    one key: the Prefect UI shows it on every step run, and its versions the history."""
    manifest = get_context().manifest
    if manifest is not None:
        await acreate_markdown_artifact(
            key="run-manifest",
            markdown=manifest_markdown(manifest),
            description=f"Step {step} ran under run {manifest['run_id']}",
        )


async def hacking_table_artifact(step: int, scopes: Mapping[str, ScopeOutcome]) -> None:
    """A table of the step's reward-hacking findings, across scopes."""
    rows = hacking_table(scopes)
    if rows:
        await acreate_table_artifact(
            key=f"hacking-step-{step}",
            table=rows,
            description=f"Step {step} reward-hacking findings",
        )


async def summary_artifact(
    step: int, scope: str, summary: BatchSummary | None, dropped: list[Dropped]
) -> None:
    """The scope's summary of the step, and the outputs it went on without."""
    await acreate_markdown_artifact(
        key=f"summary-step-{step}-{slug(scope)}",
        markdown=summary_markdown(step, scope, summary, dropped),
        description=f"Step {step} summary ({scope})",
    )


async def rubric_diff_artifact(
    step: int,
    scope: str,
    before: RubricVersion,
    after: RubricVersion,
    proposal: RubricUpdateProposal | None,
    outcome: UpdateOutcome,
    due: Sequence[DueCriterion],
) -> None:
    """The scope's rubric update of the step (:func:`rubric_diff_markdown`)."""
    await acreate_markdown_artifact(
        key=f"rubric-diff-step-{step}-{slug(scope)}",
        markdown=rubric_diff_markdown(before, after, proposal, outcome, due),
        description=f"Step {step} rubric update ({scope})",
    )


def slug(scope: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in scope.lower())[:40]
