"""One scope of a step's run: its state in one object, its stages as its methods.

:func:`flows.step_pipeline.step_pipeline` walks each scope through them in order: load →
analyze (and summarize each chunk) → consolidate → query → retrieve → update →
canary/publish, beside remember.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ParamSpec, TypeVar, cast

from prefect import Task

from amaris.agents.blocks import TrainerMetadata
from amaris.agents.findings import Injections, StepFindings
from amaris.agents.schemas import BatchSummary, IndividualAnalysis, RubricUpdateProposal
from amaris.llm.outgoing import Batch
from amaris.memory.records import RolloutRecord
from amaris.rubric.informativeness import (
    DueCriterion,
    ScopeStats,
    UpdaterView,
    due_for_retirement,
    updater_view,
)
from amaris.rubric.model import RubricVersion
from amaris.steps.context import get_context
from amaris.steps.outcomes import (
    Dropped,
    ScopeOutcome,
    UpdateKind,
    UpdateOutcome,
    scope_outcome,
)
from amaris.text.injection import scan_records
from amaris.trust.audit.models import AlarmEvidence
from amaris.trust.rubric_canary.check import canary_rollouts
from flows.artifacts import (
    rubric_diff_artifact,
    rubric_diff_markdown,
    summary_artifact,
    summary_markdown,
)
from flows.scope_facts import flagged, group_peers, has_trajectory, is_update_step, with_scores
from tasks._common import DROPS, LLMTask, criteria_context, split_for, unwalked
from tasks.analyze import ChunkTurns, analyze_chunk, forget_analyses
from tasks.canary import CanaryRequest, check_canary
from tasks.generate_queries import generate_queries
from tasks.meta_summarize import meta_summarize
from tasks.models import AgentCriterion, Peer, ScoredAnalysis
from tasks.publish_rubric import publish_update
from tasks.remember import remember
from tasks.retrieve_memory import retrieve_memory
from tasks.summarize import summarize_chunk, summary_payload
from tasks.update_rubric import propose_update

T = TypeVar("T")
P = ParamSpec("P")
log = logging.getLogger("amaris.pipeline")


@dataclass
class ScopeRun:
    """One scope of one step: what its stages read, and the outputs dropped on the way."""

    step: int
    scope: str
    records: list[RolloutRecord]
    rubric: RubricVersion
    criteria: list[AgentCriterion]
    latest: RolloutRecord
    """The scope's latest record: its ``metadata`` (the trainer's) is the scope's."""
    due: list[DueCriterion]
    informativeness: UpdaterView
    peers: dict[int, list[Peer]]
    dropped: list[Dropped] = field(default_factory=list)
    """Outputs dropped on an agent's permanent failure (the step goes on without them)."""
    queried: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the updater's request is out (or the update ended before, or is skipped)."""
    alarm: AlarmEvidence | None = None
    """The step's fidelity alarm and its evidence in this scope, for the analyzer and
    updater (:func:`tasks.audit.run_audit`)."""
    injections: Injections = field(default_factory=Injections)
    """Text addressed to the grader or the pipeline in the scope's rollouts, as amaris's
    detector finds it, and what each summary covers."""
    inline: bool = False
    """The stages run as plain calls inside the caller's task run, with no run of their
    own (per_instance mode batches scopes into task runs: :mod:`flows.scope_batches`)."""
    notes: list[str] = field(default_factory=list)
    """Inline: the scope's notable summary and rubric diff (markdown) for its batch's."""
    analysed: list[str] = field(default_factory=list)
    """Inline: keys of the per-rollout analysis files to remove once the batch is done."""
    afterwards: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Prefect's record of the scope (its rubric diff): written once the outcome is told."""

    def stage(
        self, work: Task[P, Coroutine[Any, Any, T]] | LLMTask[P, T]
    ) -> Callable[P, Awaitable[T]]:
        """``work`` as this run calls it: inline its function; else its task, every
        argument :func:`~tasks._common.unwalked`."""
        if self.inline:
            return work.fn
        run = cast(Callable[..., Awaitable[T]], work)

        def call(*args: P.args, **kwargs: P.kwargs) -> Awaitable[T]:
            return run(*(unwalked(a) for a in args), **{k: unwalked(v) for k, v in kwargs.items()})

        return call

    @property
    def metadata(self) -> TrainerMetadata:
        """The trainer's metadata of the scope's step: its latest record's."""
        return TrainerMetadata(self.latest.metadata)

    @classmethod
    async def load(
        cls,
        step: int,
        scope: str,
        records: list[RolloutRecord],
        history: list[ScopeStats | None],
    ) -> ScopeRun:
        """The scope's state at the start of its run: its current rubric and the criteria
        due for retirement after ``history`` (this step's statistics and earlier ones)."""
        ctx = get_context()
        rubric = await asyncio.to_thread(ctx.rubrics.current, scope)
        due = due_for_retirement(rubric, history, ctx.settings.rubric.retire_uninformative_after)
        return cls(
            step=step,
            scope=scope,
            records=records,
            rubric=rubric,
            criteria=AgentCriterion.of(rubric),
            latest=records[-1],
            due=due,
            informativeness=updater_view(rubric, history, due),
            peers=group_peers(records),
        )

    # analyze → summarize → consolidate

    async def analyze(self) -> tuple[list[IndividualAnalysis], list[BatchSummary]]:
        """The analyses of the scope's rollouts, and the summaries of them.

        One analyze task per chunk, queued in turn (:class:`ChunkTurns`): the gateway keeps
        the calls to concurrency.analyzer, with no gap between waves. With chunking, a
        chunk's summary starts as soon as its analyses are in; without, one summary of all
        analyses follows them."""
        size = get_context().settings.pipeline.chunk_size
        parts = [self.records[i : i + size] for i in range(0, len(self.records), size)]
        turns = ChunkTurns(len(parts))
        done = await asyncio.gather(*(self._analyze_part(i, p, turns) for i, p in enumerate(parts)))
        analyses = [analysis for chunk, _ in done for analysis in chunk]
        if get_context().settings.pipeline.use_chunking and done:
            return analyses, [summary for _, chunk in done for summary in chunk]
        if analyses:
            return analyses, await self.summarize("0", with_scores(analyses, self.records))
        return analyses, []

    async def _analyze_part(
        self, index: int, part: list[RolloutRecord], turns: ChunkTurns
    ) -> tuple[list[IndividualAnalysis], list[BatchSummary]]:
        ctx = get_context()
        groups = [self.peers[r.seq or 0] for r in part]
        found = await turns.take(
            index, lambda: self.stage(analyze_chunk)(index, part, self.criteria, groups, self.alarm)
        )
        self.dropped.extend(found.dropped)
        # amaris's own finding, merged after the task (its cache) whatever the agent wrote.
        self.injections.add(await asyncio.to_thread(scan_records, part))
        analyses = self.injections.analysed(found.analyses)
        if self.inline:
            self.analysed.extend(found.stored_as)
        else:
            # Prefect holds the chunk's result now: its per-rollout files are redundant.
            await asyncio.to_thread(forget_analyses, ctx.settings.memory.path, found.stored_as)
        if not ctx.settings.pipeline.use_chunking or not analyses:
            return analyses, []
        return analyses, await self.summarize(str(index), with_scores(analyses, part))

    async def summarize(self, label: str, analyses: list[ScoredAnalysis]) -> list[BatchSummary]:
        """Summaries of ``analyses``: one, or one per part when they do not fit the
        summarizer's context budget together (parts labelled ``<label>.<part>``). A summary
        the summarizer failed permanently to give is dropped."""
        parts = await split_for(
            "summarizer",
            criteria_context(self.criteria),
            summary_payload(self.step, self.metadata, []),
            "analyses",
            analyses,
        ) or [analyses]
        labels = [label] if len(parts) == 1 else [f"{label}.{i}" for i in range(len(parts))]
        found = await asyncio.gather(
            *(
                self.or_dropped(
                    "summarizer",
                    f"chunk {name}",
                    self.stage(summarize_chunk)(
                        self.step, self.scope, name, self.metadata, self.criteria, part
                    ),
                )
                for name, part in zip(labels, parts, strict=True)
            )
        )
        return [
            self.injections.summarised(summary, (a.rollout_id for a in part))
            for summary, part in zip(found, parts, strict=True)
            if summary is not None
        ]

    async def consolidate(self, summaries: list[BatchSummary]) -> BatchSummary | None:
        """One summary of ``summaries``; in rounds when they do not fit the
        meta-summarizer's context budget together (groups that fit are consolidated, then
        their results). ``None`` when the meta-summarizer failed permanently (dropped):
        the step then has no summary of the whole."""

        async def ask(part: str, group: list[BatchSummary]) -> BatchSummary | None:
            work = self.stage(meta_summarize)(
                self.step, self.scope, part, self.metadata, self.criteria, group
            )
            merged = await self.or_dropped("meta_summarizer", part, work)
            return None if merged is None else self.injections.merged(merged, group)

        level = 0
        while True:
            groups = await split_for(
                "meta_summarizer",
                criteria_context(self.criteria),
                {"step": self.step, "metadata": self.metadata},
                "summaries",
                summaries,
            )
            if len(groups) <= 1:
                return await ask("all", list(summaries))
            if all(len(group) == 1 for group in groups):
                # Each summary fills the budget alone: pairs, so every round shortens it.
                groups = [summaries[i : i + 2] for i in range(0, len(summaries), 2)]
            found = await asyncio.gather(
                *(
                    ask(f"{level}.{index}", group) if len(group) > 1 else _value(group[0])
                    for index, group in enumerate(groups)
                )
            )
            if any(summary is None for summary in found):
                return None
            summaries = [summary for summary in found if summary is not None]
            level += 1

    def findings(self, summary: BatchSummary) -> StepFindings:
        """The step's findings an update of the scope must rest on (the guard reads them)."""
        uninformative = [d.criterion_id for d in self.informativeness.uninformative]
        return self.injections.findings(summary, self.alarm is not None, uninformative)

    # query → retrieve → update → canary/publish

    async def update(
        self,
        summary: BatchSummary | None,
        summaries: int,
        analyses: Sequence[IndividualAnalysis] = (),
    ) -> UpdateOutcome:
        """The scope's rubric update: skipped off update steps, not asked without a
        summary; else queries → retrieval → proposal → rubric canary → guardrails and
        publication, plus the diff (its artifact among :attr:`afterwards`). A query plan
        the query generator failed permanently to give is dropped (retrieval has the
        recent steps only); an updater that failed permanently is an update ``rejected``,
        as the guardrails reject one."""
        if not is_update_step(self.step, get_context().settings.pipeline.rubric_update_frequency):
            self.queried.set()
            return self._ended("skipped", "not an update step")
        if summary is None:
            self.queried.set()
            return self._no_summary(summaries)
        try:
            queries = None
            if get_context().settings.memory.rubrics_mode == "global":
                # One prompt's memory is its own few summaries, which static memory gives.
                queries = await self.or_dropped(
                    "query_generator",
                    "queries",
                    self.stage(generate_queries)(
                        self.step, self.scope, self.metadata, self.criteria, summary
                    ),
                )
            memory = await self.stage(retrieve_memory)(self.step, self.scope, queries or [])
            proposed = self.stage(propose_update)(
                self.step,
                self.scope,
                self.version,
                self.metadata,
                self.criteria,
                summary,
                memory,
                self.informativeness,
                self.alarm,
                has_trajectory(self.records),
            )
            # Remembering starts once the updater's request is out, not while it is sent.
            out = Batch(1, self.queried.set)
            proposal = await self.or_dropped("updater", "update", out.run(proposed))
        finally:
            self.queried.set()
        if proposal is None:
            outcome = self._rejected()
        else:
            published = await self.publish(
                proposal, flagged(summary, analyses), self.findings(summary)
            )
            outcome = published.model_copy(update={"strategy": proposal.update_strategy})
        after = await asyncio.to_thread(get_context().rubrics.current, self.scope)
        if not self.inline:
            shown = (self.step, self.scope, self.rubric, after, proposal, outcome, self.due)
            self.afterwards.append(partial(rubric_diff_artifact, *shown))
        elif outcome.outcome in ("published", "rejected"):
            diff = rubric_diff_markdown(self.rubric, after, proposal, outcome, self.due, self.scope)
            self.notes.append(diff)
        return outcome

    async def publish(
        self,
        proposal: RubricUpdateProposal,
        flagged: Sequence[str] = (),
        findings: StepFindings | None = None,
    ) -> UpdateOutcome:
        """The rubric canary's report on ``proposal``, then the guardrails and publication;
        ``flagged``: the rollouts the step's analysis flagged as reward hacking;
        ``findings``: what the proposal's criteria may cite."""
        canary = await self.stage(check_canary)(
            CanaryRequest(
                step=self.step,
                scope=self.scope,
                base_version=self.version,
                proposal=proposal,
                due=self.due,
                rollouts=canary_rollouts(self.records),
                flagged=list(flagged),
                findings=findings,
            )
        )
        return await self.stage(publish_update)(
            self.step,
            self.scope,
            self.version,
            proposal,
            list(self.due),
            canary,
            findings,
            batched=self.inline,
        )

    # remember

    async def remember(
        self,
        analyses: list[IndividualAnalysis],
        summaries: list[BatchSummary],
        meta: BatchSummary | None,
    ) -> int:
        """Remember the step's analyses and summaries (embeddings included) once the
        updater's request is out: its CPU work would otherwise slow the query generation's
        answer, the retrieval and the updater's request, which are on the critical path."""
        await self.queried.wait()
        return await self.stage(remember)(
            self.step,
            self.scope,
            list(analyses),
            list(summaries),
            meta,
            self.records,
            searchable=not self.inline,
        )

    # the scope's outcome

    async def report(self, summary: BatchSummary | None) -> None:
        """The scope's summary artifact; inline, a note for its batch's artifact when the
        summary found reward hacking or an output was dropped."""
        if not self.inline:
            await summary_artifact(self.step, self.scope, summary, self.dropped)
        elif self.dropped or (summary and summary.aggregated_reward_hacking.behaviours):
            self.notes.append(summary_markdown(self.step, self.scope, summary, self.dropped, 2))

    def outcome(self, summary: BatchSummary | None, update: UpdateOutcome) -> ScopeOutcome:
        """The scope's outcome as the step's result and the registry keep it."""
        if self.dropped:
            by_agent = Counter(d.agent for d in self.dropped)
            log.warning(
                "step %s (%r): completed without %d dropped output(s) (%s)",
                self.step,
                self.scope,
                len(self.dropped),
                ", ".join(f"{a}: {n}" for a, n in sorted(by_agent.items())),
            )
        return scope_outcome(
            update,
            rollouts=len(self.records),
            hacking=summary.aggregated_reward_hacking.behaviours if summary else [],
            dropped=list(self.dropped),
        )

    @property
    def version(self) -> int:
        return self.rubric.version

    async def or_dropped(self, agent: str, part: str, work: Awaitable[T]) -> T | None:
        """``work``'s result, or ``None`` when ``agent`` failed permanently (invalid output
        after the re-ask, a reply cut by ``max_tokens``, a context overflow): the piece is
        dropped, logged and recorded. Other failures propagate (transient ones after the
        task's retries): they fail the step, which a repair re-runs."""
        try:
            return await work
        except DROPS as exc:
            record = Dropped.of(agent, part, exc)
            self.dropped.append(record)
            where = f"step {self.step} ({self.scope!r})"
            log.warning("%s: %s output for %s dropped: %s", where, agent, part, record.reason)
            return None

    def _ended(self, kind: UpdateKind, reason: str) -> UpdateOutcome:
        return UpdateOutcome(
            outcome=kind, version=self.version, base_version=self.version, reason=reason
        )

    def _no_summary(self, summaries: int) -> UpdateOutcome:
        """The outcome of an update step left without a summary: the updater is not asked."""
        if summaries > 1:
            why = f"the meta-summary of the {summaries} chunk summaries was dropped"
        elif any(d.agent == "summarizer" for d in self.dropped):
            why = "every summary was dropped"
        else:
            why = "every analysis was dropped"
        reason = f"no summary to update from: {why}"
        log.warning("step %s (%r): no rubric update, %s", self.step, self.scope, reason)
        return self._ended("no_update", reason)

    def _rejected(self) -> UpdateOutcome:
        reason = f"the updater's output was invalid ({self.dropped[-1].reason})"
        log.info("step %s (%r): rubric update rejected: %s", self.step, self.scope, reason)
        return self._ended("rejected", reason)


async def _value(value: T) -> T:
    return value
