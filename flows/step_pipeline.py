"""The step flow: one Prefect flow run per training step, named ``step-<N>``."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from prefect import State, flow
from prefect.exceptions import MissingResult
from prefect.states import Completed
from pydantic import BaseModel

from amaris.steps.context import get_context
from amaris.steps.outcomes import (
    RubricStatus,
    ScopeOutcome,
    StepRun,
    recorded_scopes,
    rubric_status,
    scopes_json,
)
from amaris.steps.runner import finish_before_stop
from flows.artifacts import (
    audit_artifact,
    criteria_table_artifact,
    hacking_table_artifact,
    manifest_artifact,
    usage_artifact,
)
from flows.scope_batches import ScopeWork, by_scope, process_all
from tasks._common import unwalked
from tasks.audit import run_audit
from tasks.judge_canaries import JudgeCanaryRequest, audit_pairs, check_judge_canaries
from tasks.load_rollouts import load_step_rollouts
from tasks.measure_criteria import measure_criteria

log = logging.getLogger("amaris.pipeline")

_outcome_known: ContextVar[Callable[[StepResult], None] | None] = ContextVar(
    "amaris_step_outcome_known", default=None
)
"""Told the step's result by the flow once it is recorded (:func:`run_step_flow`)."""


class StepResult(BaseModel):
    """What a step's run gives: its rollouts and each scope's outcome."""

    step: int
    rollouts: int
    scopes: dict[str, ScopeOutcome]

    def run(self) -> StepRun:
        """What the step's coordinator is told."""
        return StepRun(step=self.step, scopes=self.scopes)

    def rubric(self) -> RubricStatus:
        """What the step did to the rubric (:func:`~amaris.steps.outcomes.rubric_status`)."""
        return rubric_status(outcome.outcome for outcome in self.scopes.values())

    def final_state(self) -> State[StepResult]:
        """The run's final state, holding this result: Completed, named for :meth:`rubric`
        (``Updated``, ``Unchanged``, ``Rejected``: the runs list shows it), the scopes'
        outcomes in its message."""
        return Completed(data=self, name=self.rubric().capitalize(), message=self._summary())

    def _summary(self) -> str:
        """How many scopes ended how, then the first reasons, rejections first (bounded:
        per_instance mode has a scope per input)."""
        counts = Counter(outcome.outcome for outcome in self.scopes.values())
        told = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no scope"
        reasons = [
            f"{scope} {o.outcome}: {o.reason[:200]}"
            for scope, o in sorted(self.scopes.items(), key=lambda s: s[1].outcome != "rejected")
            if o.reason
        ]
        return "; ".join([f"step {self.step}: {told}", *reasons[:3]])


# The flow's result is not persisted: its callers get it in memory, and the step registry
# keeps it for everyone else. A persisted flow result is a keyless artifact on the run, and
# tasks without a cache would inherit the persistence (a write per run). The tasks whose
# results a re-run reuses persist their own (their cache). Its one parameter is amaris's
# own int: validating it would build a pydantic model of the signature on every run.
@flow(name="amaris-step", flow_run_name="step-{step}", validate_parameters=False)
async def step_pipeline(step: int) -> State[StepResult]:
    """Analyse, summarise, remember and (on update steps) evolve the rubric of ``step``.

    In ``per_instance`` mode every input seen in the step is processed as its own scope.
    Ends in :meth:`StepResult.final_state`, so a refused update does not look like a plain
    success; a caller of the flow gets the state's result, the outcome per scope. No time
    bound fails the step: a slow judge makes it late, and the run shows how long it waited
    on the judge.
    """
    try:
        outcome = await _run_step(step)
    except Exception:
        await usage_artifact(step, None, failed=True)
        raise
    return outcome.final_state()


async def run_step_flow(step: int) -> StepRun:
    """Run the step flow in this process: what its coordinator is told (the local
    :class:`~amaris.steps.launcher.StepLauncher` calls it on the pipeline loop).

    Told once the flow has recorded the step's outcome (the step registry, the rubrics'
    export): the run's last artifacts and its final state, Prefect's record of it, follow
    while the trainer goes on (:func:`~amaris.steps.runner.finish_before_stop`)."""
    loop = asyncio.get_running_loop()
    known: asyncio.Future[StepResult] = loop.create_future()

    def tell(result: StepResult) -> None:
        if not known.done():
            known.set_result(result)

    token = _outcome_known.set(tell)
    try:
        run = loop.create_task(_run_to_end(step), name=f"step-{step}-flow")
    finally:
        _outcome_known.reset(token)
    try:
        await asyncio.wait((run, known), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        run.cancel()
        raise
    if not known.done():
        return run.result()
    # Also when the run has just ended: a failure of its record is logged, not lost.
    finish_before_stop(run, f"step {step}: the flow run's record")
    return known.result().run()


async def _run_to_end(step: int) -> StepRun:
    """The step flow run to its end: what its final state holds.

    A run that ended Completed but whose final state Prefect's server answered without
    its data (a write it retried) is told from the step registry, where the flow recorded
    its outcome before ending."""
    try:
        # The flow returns its final state; Prefect gives its caller that state's result.
        return StepResult.model_validate(await step_pipeline(step)).run()
    except MissingResult:
        record = await asyncio.to_thread(get_context().steps.get, step)
        if record is None or record.scopes is None:
            raise
        log.warning(
            "step %s: Prefect gave the run's final state without its result; "
            "its outcome is read from the step registry",
            step,
        )
        return StepRun(step=step, scopes=recorded_scopes(record))


async def _run_step(step: int) -> StepResult:
    ctx = get_context()
    records = await load_step_rollouts(step)
    # First: on an alarm, its evidence goes to the scopes' analyzer and updater.
    audit = await run_audit(step, records)
    # The statistics of this step and, to count streaks, of the steps before it.
    window = ctx.settings.rubric.retire_uninformative_after or 1
    measured = await measure_criteria(step, unwalked(list(records)), window)
    works = [
        ScopeWork(
            scope=scope,
            records=rows,
            history=measured.get(scope, []),
            alarm=None if audit is None else audit.evidence_for(scope),
        )
        for scope, rows in by_scope(records).items()
    ]
    # The judge canaries (one task for the step: a per-scope 2% budget would be nothing in
    # per_instance mode) run beside the scopes; the training judge is asked again about the
    # rollouts it paid more than the audit judge (beyond the tolerance an alarm allows).
    pairs = audit_pairs(audit, records, ctx.settings.judge_canaries.swap_tolerance)
    batched = ctx.settings.memory.rubrics_mode == "per_instance"
    # The artifacts that need no scope's outcome are written while the scopes wait on the
    # LLM, off the step's tail.
    afterwards: list[Callable[[], Awaitable[None]]] = []
    results, _, _ = await asyncio.gather(
        process_all(step, works, batched, afterwards),
        check_judge_canaries(
            unwalked(
                JudgeCanaryRequest.of(
                    step, records, audit_pairs=pairs, budget=audit.canary_budget if audit else None
                )
            )
        ),
        asyncio.gather(
            criteria_table_artifact(step, measured),
            *([audit_artifact(step, audit)] if audit is not None else []),
            manifest_artifact(step),
        ),
    )
    outcome = StepResult(step=step, rollouts=len(records), scopes=dict(results))
    published = any(r.outcome == "published" for _, r in results)
    # The registry (in the shared one too: a replica that did not run this flow reads it
    # there) and the rubrics' export: the step's outcome, then told to a local caller.
    await asyncio.gather(
        asyncio.to_thread(ctx.steps.set, step, scopes=scopes_json(outcome.scopes)),
        *([asyncio.to_thread(ctx.rubrics.export)] if published else []),
    )
    told = _outcome_known.get()
    if told is not None:
        told(outcome)
    # Prefect's record of the run (a request to its server each): their failure is logged,
    # it does not undo the outcome.
    written = await asyncio.gather(
        *(write() for write in afterwards),
        hacking_table_artifact(step, outcome.scopes),
        usage_artifact(step, outcome.rollouts),
        return_exceptions=True,
    )
    for error in written:
        if isinstance(error, Exception):
            log.warning("step %s: an artifact of its run was not written: %s", step, error)
        elif isinstance(error, BaseException):
            raise error
    return outcome
