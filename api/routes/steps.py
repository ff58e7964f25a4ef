"""Step control: ``POST /complete`` and ``GET /rubric_status/wait`` (AMARIS API); a step's
logged rollouts and per-rollout analyses (read-only)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Body, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from amaris.jsonfile import JSONDict
from amaris.llm.ledger import cost
from amaris.memory.models import StepRecord, StepStatus
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import step_records
from amaris.models import ErrorDetail, ErrorResponse
from amaris.services import Services
from amaris.step_answer import AnyScopeOutcome, WaitAnswer
from amaris.steps.coordinator import UnknownStepError
from amaris.steps.outcomes import RubricStatus, StepOutcome
from amaris.trust.audit.history import audit_of
from amaris.trust.audit.models import AuditSummary, StepAudit
from api.deps import ServicesDep
from api.errors import (
    AUTH_ERRORS,
    INPUT_ERRORS,
    STEP_ERRORS,
    STORAGE_ERRORS,
    Responses,
    error_response,
)

router = APIRouter(tags=["steps"])
log = logging.getLogger("amaris.api")
T = TypeVar("T")

_LOOKUP_ERRORS: Responses = {
    **AUTH_ERRORS,
    404: {"model": ErrorResponse, "description": "No step of that number."},
    422: INPUT_ERRORS[422],
}

StepNumber = Annotated[int, Path(ge=0, description="Training step.")]


class CompleteRequest(BaseModel):
    """Optional body of ``POST /complete``."""

    model_config = ConfigDict(extra="forbid")

    step: int | None = Field(
        default=None, ge=0, description="Step to complete; default: every open step."
    )


class CompleteResponse(BaseModel):
    """``complete``: the step's pipeline started; ``noop``: nothing changed (steps complete
    by themselves, or the step was completed already), ``reason`` says which."""

    status: Literal["complete", "noop"]
    reason: str | None = None


@router.post(
    "/complete",
    response_model=CompleteResponse,
    response_model_exclude_none=True,
    responses={**INPUT_ERRORS, **STEP_ERRORS, **STORAGE_ERRORS},
)
async def complete(
    services: ServicesDep, body: Annotated[CompleteRequest | None, Body()] = None
) -> CompleteResponse:
    """Mark the step's rollouts complete and start its pipeline (manual mode only).

    Without a body: every open step. A ``step`` amaris does not know (no rollout logged,
    never completed) is completed only if it is the next step, the one after the newest
    step amaris knows (0 when none): else 409, nothing changes. Over ``pipeline.max_step``:
    422. A step completed already (done, or completing now) answers ``noop``.
    """
    step = body.step if body else None
    status = await services.coordinator.complete(step)
    if status == "complete":
        return CompleteResponse(status="complete")
    if services.settings.pipeline.rollouts_per_step is not None:
        why = "steps complete by themselves (pipeline.rollouts_per_step is set)"
    else:
        why = f"step {step} is {services.coordinator.status(step or 0)} already: nothing changed"
    return CompleteResponse(status="noop", reason=why)


_WAIT_ERRORS: Responses = {
    **INPUT_ERRORS,
    404: {
        "model": ErrorResponse,
        "description": "`step` is unknown: no rollout was logged "
        "for it and it was never completed.",
    },
}


@router.get("/rubric_status/wait", response_model=WaitAnswer, responses=_WAIT_ERRORS)
async def rubric_status_wait(
    request: Request,
    services: ServicesDep,
    step: Annotated[
        int | None, Query(ge=0, description="Default: the latest started step.")
    ] = None,
    timeout: Annotated[
        float | None,
        Query(
            gt=0,
            le=86400,
            description=(
                "Seconds to wait at most, capped by `server.max_wait_seconds`; then answers "
                "status `pending` (ask again). Default: the cap."
            ),
        ),
    ] = None,
) -> WaitAnswer | Response:
    """Block until the step's pipeline has finished (every scope of the step), then say
    what it did to the rubric.

    ``status``: ``failed`` when the run failed; else ``updated`` when any scope published
    a new version; else ``rejected`` when any scope's update was rejected; else
    ``unchanged``. Each scope's ``outcome`` and ``reason`` are in ``scopes``. Answers at
    once for a step that is done or failed, 404 for an unknown ``step``; stops waiting
    when the client disconnects or the server is stopping (``pending``).
    """
    cap = services.settings.server.max_wait_seconds
    wait = services.coordinator.wait(step, cap if timeout is None else min(timeout, cap))
    try:
        outcome = await _unless_disconnected(request, wait)
    except UnknownStepError as exc:
        log.warning("404 GET /rubric_status/wait: step: %s", exc)
        return error_response(404, "not_found", [ErrorDetail(field="step", message=str(exc))])
    if outcome is None:
        # Nobody reads this answer; 499 (nginx's "client closed request") labels the
        # request in the metrics.
        return Response(status_code=499)
    return WaitAnswer.model_validate(outcome, from_attributes=True)


async def _until_disconnected(request: Request) -> None:
    """Returns once the server reports that the client has gone."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T | None:
    """``work``'s result, or None when the client disconnects first (``work`` is then
    cancelled: a long poll must not outlive its client)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, gone):
            pending.cancel()
        await asyncio.gather(task, gone, return_exceptions=True)
    return None if task.cancelled() else task.result()


_RUBRIC = (
    "What the step did to the rubric once its run is done: updated, unchanged or rejected "
    "(the rule of `GET /rubric_status/wait`); null before, and when it failed."
)


class StepStatusPublic(BaseModel):
    """One step's status."""

    step: int
    status: Literal["open", "completing", "done", "failed"]
    rubric: RubricStatus | None = Field(default=None, description=_RUBRIC)
    audit: AuditSummary | None = Field(
        default=None,
        description="The audit judge's check of the step's rewards (docs/fidelity.md); "
        "absent while the auditor is off or the step is not audited yet.",
    )


class StepDetail(BaseModel):
    """Answer of ``GET /steps/{step}``."""

    step: int
    status: Literal["open", "completing", "done", "failed"]
    rubric: RubricStatus | None = Field(default=None, description=_RUBRIC)
    scopes: dict[str, AnyScopeOutcome] | None = Field(
        default=None,
        description="Per scope, once the step's run is done: the outcome of its rubric "
        "update and its reason, rubric version, strategy, findings; null before.",
    )
    audit: StepAudit | None = Field(
        default=None,
        description="The step's audit: fidelity for the step and per scope, the criteria "
        "the two judges read differently, the alarm and its evidence; null while the "
        "auditor is off or the step is not audited yet.",
    )
    cost_usd: float | None = Field(
        default=None,
        description="Dollars of the step's LLM calls made in this process so far: its "
        "rollouts' judge calls and its pipeline's agents, at the configured prices "
        "(agents.<agent>.price, else pricing.<model>); null when a call that used tokens "
        "has no price, or none is configured.",
    )


class RerunResponse(BaseModel):
    """``started``: the step's flow runs again, reusing finished work."""

    step: int
    status: Literal["started", "running", "done", "open"]


# exclude_unset: a step without an audit is listed without the audit's fields.
@router.get(
    "/steps",
    response_model=list[StepStatusPublic],
    response_model_exclude_unset=True,
    responses=INPUT_ERRORS,
)
async def list_steps(
    services: ServicesDep,
    status: Annotated[
        Literal["open", "completing", "done", "failed"] | None,
        Query(description="Only steps with this status."),
    ] = None,
) -> list[StepStatusPublic]:
    """Steps, their pipeline status, what each did to the rubric and their audit."""
    known = services.coordinator.snapshot()
    records = {r.step: r for r in await asyncio.to_thread(services.steps.list)}
    listed = []
    for step, st in sorted(known.items()):
        if status is not None and st != status:
            continue
        record = records.get(step)
        rubric = _rubric(st, record)
        audit = audit_of(record) if services.settings.auditor_on else None
        listed.append(
            StepStatusPublic(step=step, status=st, rubric=rubric, audit=audit.summary())
            if audit is not None
            else StepStatusPublic(step=step, status=st, rubric=rubric)
        )
    return listed


def _done(status: StepStatus | None, record: StepRecord | None) -> StepOutcome | None:
    """A done step's outcome, from its registry record."""
    if status != "done" or record is None:
        return None
    return StepOutcome.of(record)


def _rubric(status: StepStatus | None, record: StepRecord | None) -> RubricStatus | None:
    """What a done step did to the rubric, from its registry record."""
    outcome = _done(status, record)
    return None if outcome is None else outcome.rubric()


@router.get("/steps/{step}", response_model=StepDetail, responses=_LOOKUP_ERRORS)
async def step_detail(step: StepNumber, services: ServicesDep) -> StepDetail | JSONResponse:
    """One step: its pipeline status, what it did to the rubric (each scope's outcome and
    reason), its audit and what its LLM calls cost."""
    unknown = _unknown_step(services, step)
    if unknown is not None:
        return unknown
    record = await asyncio.to_thread(services.steps.get, step)
    status = services.coordinator.status(step)
    outcome = _done(status, record)
    return StepDetail.model_validate(
        {
            "step": step,
            "status": status,
            "rubric": None if outcome is None else outcome.rubric(),
            "scopes": None if outcome is None else outcome.scopes,
            "audit": audit_of(record),
            "cost_usd": cost(services.gateway.ledger.for_step(step), services.settings.pricing),
        }
    )


@router.post("/steps/{step}/rerun", response_model=RerunResponse, responses=INPUT_ERRORS)
async def rerun_step(step: int, services: ServicesDep) -> RerunResponse:
    """Re-run a failed step's pipeline (what the scheduled repair does)."""
    outcome = await services.coordinator.rerun(step)
    if outcome == "unknown":
        raise HTTPException(status_code=404, detail=f"step {step} is unknown")
    return RerunResponse.model_validate({"step": step, "status": outcome})


StepStatusName = Literal["open", "completing", "done", "failed"]


class StepRollouts(BaseModel):
    """Answer of ``GET /steps/{step}/rollouts``."""

    step: int
    status: StepStatusName
    # RolloutRecord.to_json(): each record's JSON as logged (fields of older versions
    # included), not the model's defaults.
    records: list[JSONDict] = Field(
        description="The rollout log's records of the step, in arrival order: rollout, "
        "metadata, score, status, rubric_version, verdicts, scope, seq, late, time."
    )


class RolloutAnalysis(BaseModel):
    """The analyzer's verdict on one rollout of a step."""

    rollout_id: str
    scope: str
    # The analyzer's reply as stored (JSON of the agent's schema at the time it ran).
    analysis: JSONDict = Field(
        description="IndividualAnalysis (amaris/agents/schemas.py): reward_hacking_analysis "
        "(detected, severity, behaviours with tag and evidence), rubric_evaluation, ..."
    )


class StepAnalyses(BaseModel):
    """Answer of ``GET /steps/{step}/analyses``."""

    step: int
    status: StepStatusName
    rollouts: int = Field(description="Rollouts of the step the pipeline analyses (not late).")
    analyses: list[RolloutAnalysis] = Field(
        description="Stored analyses, in arrival order; empty until the step's flow has "
        "analysed it, and once past memory.analysis_retention_steps."
    )


def _unknown_step(services: Services, step: int) -> JSONResponse | None:
    if services.coordinator.status(step) is not None:
        return None
    return error_response(
        404, "not_found", [ErrorDetail(field="step", message=f"step {step} is unknown")]
    )


def _records(services: Services, step: int) -> list[RolloutRecord]:
    return step_records(services.rollouts, services.settings.memory.path, step)


@router.get("/steps/{step}/rollouts", response_model=StepRollouts, responses=_LOOKUP_ERRORS)
async def step_rollouts(step: StepNumber, services: ServicesDep) -> StepRollouts | JSONResponse:
    """The step's rollout-log records (from Qdrant, or its archive past retention);
    what `amaris export` writes."""
    unknown = _unknown_step(services, step)
    if unknown is not None:
        return unknown
    records = await asyncio.to_thread(_records, services, step)
    return StepRollouts.model_validate(
        {
            "step": step,
            "status": services.coordinator.status(step),
            "records": [record.to_json() for record in records],
        }
    )


def _analyses(
    services: Services, step: int, scope: str | None
) -> tuple[int, list[RolloutAnalysis]]:
    records = [
        r for r in _records(services, step) if not r.late and (scope is None or r.scope == scope)
    ]
    by_scope: dict[str, list[str]] = {}
    for record in records:
        by_scope.setdefault(record.scope, []).append(record.rollout.id)
    stored = {name: services.memory.get_analyses(name, step, ids) for name, ids in by_scope.items()}
    found = [
        RolloutAnalysis(
            rollout_id=r.rollout.id, scope=r.scope, analysis=stored[r.scope][r.rollout.id]
        )
        for r in records
        if r.rollout.id in stored[r.scope]
    ]
    return len(records), found


@router.get("/steps/{step}/analyses", response_model=StepAnalyses, responses=_LOOKUP_ERRORS)
async def step_analyses(
    step: StepNumber,
    services: ServicesDep,
    scope: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="Only this scope (default: all)."),
    ] = None,
) -> StepAnalyses | JSONResponse:
    """The per-rollout analyses of a step (reward-hacking findings per rollout)."""
    unknown = _unknown_step(services, step)
    if unknown is not None:
        return unknown
    count, found = await asyncio.to_thread(_analyses, services, step, scope)
    return StepAnalyses.model_validate(
        {
            "step": step,
            "status": services.coordinator.status(step),
            "rollouts": count,
            "analyses": found,
        }
    )
