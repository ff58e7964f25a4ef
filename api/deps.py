"""Dependencies shared by the routes. (The bearer key is checked before routing, by
:class:`api.middleware.RequestGuard`, for every path but /healthz.)"""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import Depends, Request

from amaris.models import ScoreRequest, ScoreResponse
from amaris.scoring.batch import BatchScoring
from amaris.scoring.reward import score_rollout
from amaris.services import Services

# `async def` although it does no I/O: FastAPI runs a plain `def` dependency in a worker
# thread, a thread round-trip per request on the hot path.


async def get_services(request: Request) -> Services:
    """The process's services, built at start-up."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def score_one(request: ScoreRequest, services: Services) -> ScoreResponse:
    """:func:`~amaris.scoring.reward.score_rollout` with this service's parts.

    Raises:
        ScoringPausedError: a fidelity alarm paused scoring (``audit.on_alarm: pause``).
    """
    services.pause.check()
    return await score_rollout(
        request,
        scopes=services.scopes,
        scorer=services.scorer,
        coordinator=services.coordinator,
        ids=services.ids,
        sync=services.settings.pipeline.mode == "sync",
    )


def batch_scoring(services: Services) -> BatchScoring:
    """The batch scoring of ``/batch_score`` and ``/get_reward`` with this service's parts.

    Raises:
        ScoringPausedError: a fidelity alarm paused scoring (``audit.on_alarm: pause``).
    """
    services.pause.check()
    return BatchScoring(
        scorer=services.scorer,
        score_one=partial(score_one, services=services),
        max_items=services.settings.server.max_batch_items,
        max_pending=services.settings.scoring.max_pending,
        scopes=services.scopes,
    )
