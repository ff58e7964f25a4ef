"""Analyzer: one deep analysis per rollout, a chunk of rollouts per task run.

One task run per rollout would cost the step time: each run's set-up and state changes run
on the pipeline loop and in Prefect's server ahead of its LLM call, for hundreds of runs a
step. A chunk task asks for its rollouts'
analyses concurrently (the gateway bounds the calls) and writes each analysis to
``<memory.path>/pipeline-cache/`` under its own key as soon as it arrives, so a retry
or a re-run of the chunk asks only for the analyses still missing. Once the chunk's
result is persisted by Prefect (its cache), those files are removed. Prefect's cache
alone does not do this: it keeps a task's result only when the whole task succeeded, so
without these files a chunk that failed on one rollout asks again for all of them
(``tests/app/test_repair.py``, ``test_rerun_asks_only_for_the_analyses_a_failed_chunk_lacked``).
(Prefect's own result store, written per analysis, resolves its folder on every write,
which is costly.)
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import TypeVar, cast

from pydantic import BaseModel, TypeAdapter, ValidationError

from amaris.agents.payloads import AlarmData, AnalyzerContext, AnalyzerInput, RolloutData
from amaris.agents.schemas import IndividualAnalysis
from amaris.atomic import replace_file
from amaris.llm.budget import CHARS_PER_TOKEN, MIN_FIELD_CHARS, fit_texts, json_chars
from amaris.llm.gateway import LLMTransientError
from amaris.llm.outgoing import Batch
from amaris.logs import loggable
from amaris.memory.records import RolloutRecord
from amaris.steps.context import get_context
from amaris.steps.outcomes import Dropped
from amaris.steps.retry import digest
from amaris.trust.audit.models import AlarmEvidence
from tasks._common import DROPS, ask, llm_task, prompt_tokens
from tasks.models import AgentCriterion, Peer, is_trajectory, outcome_tail

log = logging.getLogger("amaris.pipeline")
T = TypeVar("T")


class ChunkAnalyses(BaseModel):
    """What :func:`analyze_chunk` gives (and Prefect persists as its cache)."""

    analyses: list[IndividualAnalysis]
    """Each with its rollout's id (the log's, whatever the analyzer wrote)."""
    dropped: list[Dropped]
    stored_as: list[str]
    """The keys of the chunk's per-rollout files (:func:`analysis_key`), in order."""


class DroppedAnalysis(BaseModel):
    """A rollout's analysis dropped (its per-rollout file, so a retry does not ask again)."""

    rollout_id: str
    dropped: Dropped


StoredAnalysis = IndividualAnalysis | DroppedAnalysis
"""A rollout's file in ``<memory.path>/pipeline-cache/``: its analysis, or why it has none."""
_STORED: TypeAdapter[StoredAnalysis] = TypeAdapter(StoredAnalysis)

_calls_out: ContextVar[Callable[[], None] | None] = ContextVar(
    "amaris_analyze_calls_out", default=None
)
"""Called by :func:`analyze_chunk` once its calls are out (:class:`Batch`)."""


class ChunkTurns:
    """The analyze runs of a scope's chunks, in turn: chunk i's run starts once chunk i-1's
    calls are out (each request sent, waiting for a slot or answered from the store; or
    its run ended), so that the set-up of the later runs on the pipeline loop does not
    hold back the requests of the first wave."""

    def __init__(self, chunks: int) -> None:
        self._queued = [asyncio.Event() for _ in range(chunks)]

    async def take(self, index: int, run: Callable[[], Awaitable[T]]) -> T:
        """``run()``, chunk ``index``'s analyze run, in its turn."""
        if index:
            await self._queued[index - 1].wait()
        _calls_out.set(self._queued[index].set)
        try:
            return await run()
        finally:
            self._queued[index].set()


def analysis_key(
    record: RolloutRecord,
    criteria: list[AgentCriterion],
    group: list[Peer],
    alarm: AlarmEvidence | None = None,
) -> str:
    """The result-store key of one rollout's analysis: everything it depends on."""
    ctx = get_context()
    # With no alarm, the key of a step before the audit judge existed.
    alarmed = () if alarm is None else (alarm,)
    return "analyzer-item-" + digest(
        ctx.namespace, record, criteria, group, *alarmed, ctx.prompt_fingerprint("analyzer")
    )


async def analyze_one(
    record: RolloutRecord,
    criteria: list[AgentCriterion],
    group: list[Peer],
    alarm: AlarmEvidence | None = None,
) -> IndividualAnalysis:
    """Analyse one logged rollout: reward hacking, progress, rubric fit (the template's
    trajectory sections sent for an agent's trajectory only)."""
    rollout = record.rollout
    trajectory = is_trajectory(rollout)
    # Most shared first: the step's metadata, then what a GRPO group shares (its prompt and
    # reference), then this rollout's own data. The analyzer reads JSON: the verdicts as
    # logged.
    data: AnalyzerInput = {
        "metadata": record.metadata,
        "rollout": {
            "input": rollout.input,
            "supplemental_context": rollout.supplemental_context,
            "id": rollout.id,
            "output": rollout.output,
        },
        "score": record.score,
        "verdicts": [v.model_dump(mode="json", exclude_unset=True) for v in record.verdicts],
        "group": [peer.data() for peer in group],
    }
    context: AnalyzerContext = {"criteria": [c.data() for c in criteria]}
    if alarm is not None:
        # Shared by every analysis of the scope: in the context block, the cached prefix.
        # AlarmData lists the keys of AlarmEvidence's JSON the agents read.
        context["fidelity_alarm"] = cast(AlarmData, alarm.model_dump(mode="json"))
    budget = await get_context().gateway.prompt_budget("analyzer")
    if budget is not None:
        data = fit_analysis(context, data, budget, record.step, outcome_tail(rollout), trajectory)
    analysis = await ask(
        "analyzer", context, data, IndividualAnalysis, record.step, trajectory=trajectory
    )
    return analysis.model_copy(update={"rollout_id": rollout.id})


def fit_analysis(
    context: AnalyzerContext,
    data: AnalyzerInput,
    budget: int,
    step: int,
    keep: str = "",
    trajectory: bool = False,
) -> AnalyzerInput:
    """The analyzer's ``data`` within ``budget`` prompt tokens (estimated, with ``context``
    in the system message, the template rendered for a ``trajectory`` or not): without the
    group's other rollouts first, then with the rollout's texts cut (head and tail kept;
    ``keep``, the end of the output, whole: a trajectory's outcome and finish reason
    lines)."""
    if prompt_tokens("analyzer", context, data, trajectory) <= budget:
        return data
    cut = ["group"] if data["group"] else []
    data = {**data, "group": []}
    rollout = data["rollout"]
    if prompt_tokens("analyzer", context, data, trajectory) > budget:
        output = rollout.get("output") or ""
        kept = keep if keep and output.endswith(keep) else ""
        texts = {
            "input": rollout.get("input") or "",
            "output": output[: len(output) - len(kept)],
            "supplemental_context": rollout.get("supplemental_context") or "",
        }
        blank = {"input": "", "output": kept, "supplemental_context": ""}
        empty: AnalyzerInput = {**data, "rollout": _with_texts(rollout, blank)}
        room = int(
            (budget - prompt_tokens("analyzer", context, empty, trajectory)) * CHARS_PER_TOKEN
        )
        if room >= MIN_FIELD_CHARS:
            fitted, names = fit_texts(texts, room, json_chars)
            cut_texts = {n: fitted[n] + (kept if n == "output" else "") for n in names}
            data = {**data, "rollout": _with_texts(rollout, cut_texts)}
            cut += [f"rollout.{n}" for n in names]
    log.info(
        "step %s: rollout %s cut to fit the analyzer's context budget of %d tokens (%s)",
        step,
        loggable(str(rollout.get("id"))),
        budget,
        ", ".join(cut) or "no room",
    )
    return data


def _with_texts(rollout: RolloutData, texts: dict[str, str]) -> RolloutData:
    """``rollout`` with the texts named in ``texts`` replaced (in their places)."""
    replaced = rollout.copy()
    if "input" in texts:
        replaced["input"] = texts["input"]
    if "supplemental_context" in texts:
        replaced["supplemental_context"] = texts["supplemental_context"]
    if "output" in texts:
        replaced["output"] = texts["output"]
    return replaced


@llm_task("analyzer", "analyze", "analyze-{index}")
async def analyze_chunk(
    index: int,
    records: list[RolloutRecord],
    criteria: list[AgentCriterion],
    groups: list[list[Peer]],
    alarm: AlarmEvidence | None = None,
) -> ChunkAnalyses:
    """Analyses of ``records`` (``groups[i]``: the other rollouts of record i's group).

    An analysis whose output stayed invalid after the re-ask, was cut by ``max_tokens`` or
    overflowed the model's context is dropped (a :class:`Dropped` in the result) and the
    chunk goes on without it.

    Raises:
        LLMTransientError: some analyses failed transiently (the others, and the dropped
            ones, are stored; the task's retry asks only for the missing ones).
        Exception: any other failure of some analysis (a bug, a refused request).
    """
    folder = get_context().settings.memory.path / "pipeline-cache"
    keys = [analysis_key(r, criteria, g, alarm) for r, g in zip(records, groups, strict=True)]
    paths = [folder / f"{key}.json" for key in keys]
    stored = await asyncio.to_thread(_read_existing, paths)
    step = records[0].step if records else None

    async def stored_or_asked(
        record: RolloutRecord, group: list[Peer], path: Path
    ) -> StoredAnalysis:
        if path in stored:
            return stored[path]
        rollout_id = record.rollout.id
        result: StoredAnalysis
        try:
            result = await analyze_one(record, criteria, group, alarm)
        except DROPS as exc:
            result = DroppedAnalysis(
                rollout_id=rollout_id,
                dropped=Dropped.of("analyzer", f"rollout {rollout_id}", exc),
            )
            log.warning(
                "step %s: analyzer output for rollout %s dropped: %s",
                step,
                loggable(rollout_id),
                result.dropped.reason,
            )
        await asyncio.to_thread(_write_atomically, path, result)
        return result

    out = Batch(len(records), _calls_out.get() or (lambda: None))
    outcomes = await asyncio.gather(
        *(
            out.run(stored_or_asked(r, g, p))
            for r, g, p in zip(records, groups, paths, strict=True)
        ),
        return_exceptions=True,
    )
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        log.warning(
            "step %s: %d of the %d analyses of chunk %d failed",
            step,
            len(errors),
            len(records),
            index,
        )
        # Anything but a transient failure ends the task; only those are worth its retry.
        permanent = [e for e in errors if not isinstance(e, LLMTransientError)]
        raise (permanent or errors)[0]
    results = [o for o in outcomes if not isinstance(o, BaseException)]
    analyses = [a for a in results if isinstance(a, IndividualAnalysis)]
    lost = [a.dropped for a in results if isinstance(a, DroppedAnalysis)]
    flagged = sum(1 for a in analyses if a.reward_hacking_analysis.detected)
    log.info(
        "step %s: chunk %d analysed, %d rollouts (%d from an earlier attempt, %d "
        "dropped), %d flagged for reward hacking",
        step,
        index,
        len(analyses),
        len(stored),
        len(lost),
        flagged,
    )
    return ChunkAnalyses(analyses=analyses, dropped=lost, stored_as=keys)


def forget_analyses(memory_path: Path, keys: list[str]) -> None:
    """Remove the per-rollout files of a chunk whose result Prefect now holds."""
    for key in keys:
        (memory_path / "pipeline-cache" / f"{key}.json").unlink(missing_ok=True)


def _read_existing(paths: list[Path]) -> dict[Path, StoredAnalysis]:
    found: dict[Path, StoredAnalysis] = {}
    for path in paths:
        try:
            found[path] = _STORED.validate_python(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError):  # absent, or torn by a crash: ask again
            continue
    return found


def _write_atomically(path: Path, value: StoredAnalysis) -> None:
    replace_file(path, [json.dumps(value.model_dump(mode="json"), ensure_ascii=False)])
