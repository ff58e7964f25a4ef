"""``POST /audit/ack``: a person acknowledges the fidelity alarm that paused scoring
(``audit.on_alarm: pause``; docs/fidelity.md)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from amaris.trust.audit.pause import PauseRecord
from api.deps import ServicesDep
from api.errors import INPUT_ERRORS

router = APIRouter(tags=["audit"])
log = logging.getLogger("amaris.api")


class AckRequest(BaseModel):
    """Body of ``POST /audit/ack`` (empty: ``{}``)."""

    model_config = ConfigDict(extra="forbid")


class AckResponse(BaseModel):
    """``resumed``: scoring was paused and runs again; ``not_paused``: nothing to do."""

    status: str = Field(description="resumed | not_paused")
    acknowledged: PauseRecord | None = Field(
        default=None, description="The pause lifted: the alarm's step and reason."
    )


@router.post("/audit/ack", response_model=AckResponse, responses=INPUT_ERRORS)
async def ack(services: ServicesDep, body: AckRequest) -> AckResponse:
    """Lift the pause a fidelity alarm put on scoring (``audit.on_alarm: pause``)."""
    record = await asyncio.to_thread(services.pause.ack)
    if record is None:
        return AckResponse(status="not_paused")
    log.warning("fidelity alarm of step %s acknowledged over HTTP", record.step)
    return AckResponse(status="resumed", acknowledged=record)
