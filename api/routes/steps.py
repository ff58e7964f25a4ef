"""Step control: ``POST /complete`` and ``GET /rubric_status/wait`` (AMARIS API)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

from api.deps import ServicesDep
from api.errors import INPUT_ERRORS

router = APIRouter(tags=["steps"])


class CompleteRequest(BaseModel):
    """Optional body of ``POST /complete``."""

    model_config = ConfigDict(extra="forbid")

    step: int | None = Field(
        default=None, ge=0, description="Step to complete; default: every open step."
    )


class CompleteResponse(BaseModel):
    """``complete``: the step's pipeline started; ``noop``: steps complete by themselves
    (``pipeline.rollouts_per_step`` is set)."""

    status: Literal["complete", "noop"]


class WaitResponse(BaseModel):
    """Outcome of waiting for a step's pipeline."""

    status: Literal["updated", "failed", "pending"] = Field(
        description="updated: the step's pipeline finished; failed: it failed (see error; "
        "`amaris repair` re-runs it); pending: the timeout passed first."
    )
    mode: Literal["global", "per_instance"]
    step: int | None
    error: str | None = None
    step_status: str | None = None
    scopes: dict[str, Any] | None = Field(
        default=None, description="Per scope: outcome, rubric version, strategy, findings."
    )


@router.post("/complete", response_model=CompleteResponse, responses=INPUT_ERRORS)
async def complete(
    services: ServicesDep, body: Annotated[CompleteRequest | None, Body()] = None
) -> CompleteResponse:
    """Mark the step's rollouts complete and start its pipeline (manual mode only)."""
    status = await services.coordinator.complete(body.step if body else None)
    return CompleteResponse.model_validate({"status": status})


@router.get("/rubric_status/wait", response_model=WaitResponse, responses=INPUT_ERRORS)
async def rubric_status_wait(
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
                "Seconds to wait at most; then answers status `pending`. Default: until done."
            ),
        ),
    ] = None,
) -> WaitResponse:
    """Block until the step's pipeline has finished (every scope of the step)."""
    return WaitResponse.model_validate(await services.coordinator.wait(step, timeout))


class StepStatusPublic(BaseModel):
    """One step's status."""

    step: int
    status: Literal["open", "completing", "done", "failed"]


class RerunResponse(BaseModel):
    """``started``: the step's flow runs again, reusing finished work."""

    step: int
    status: Literal["started", "running", "done", "open"]


@router.get("/steps", response_model=list[StepStatusPublic], responses=INPUT_ERRORS)
async def list_steps(
    services: ServicesDep,
    status: Annotated[Literal["open", "completing", "done", "failed"] | None,
                      Query(description="Only steps with this status.")] = None,
) -> list[StepStatusPublic]:
    """Steps and their pipeline status."""
    known = services.coordinator.snapshot()
    return [StepStatusPublic.model_validate({"step": step, "status": st})
            for step, st in sorted(known.items()) if status is None or st == status]


@router.post("/steps/{step}/rerun", response_model=RerunResponse, responses=INPUT_ERRORS)
async def rerun_step(step: int, services: ServicesDep) -> RerunResponse:
    """Re-run a failed step's pipeline (what the scheduled repair does)."""
    outcome = await services.coordinator.rerun(step)
    if outcome == "unknown":
        raise HTTPException(status_code=404, detail=f"step {step} is unknown")
    return RerunResponse.model_validate({"step": step, "status": outcome})
