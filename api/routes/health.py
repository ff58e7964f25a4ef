"""``GET /healthz``: liveness, judge backend (offline shown unmistakably), rubric version,
and ``degraded`` with its cause while durable writes fail (full disk, locked database)."""

from datetime import UTC, datetime

from fastapi import APIRouter

from amaris import __version__
from amaris.models import HealthResponse, JudgeReachability, StructuredOutputStatus
from amaris.services import Services
from amaris.settings import AUDITOR
from amaris.trust.audit.pause import ScoringPausedError
from api.deps import ServicesDep

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse)
async def healthz(services: ServicesDep) -> HealthResponse:
    """Service status. Needs no key.

    ``counters`` (:attr:`~amaris.scoring.scorer.Scorer.counters`): each rollout answered
    once stored in the rollout log counts in exactly one of ``scored``, ``cached``,
    ``degenerate`` and ``unscored``; one refused with 503 because a durable write failed,
    in ``unstored``; one the judge's queue refused (``scoring.max_pending``), in
    ``overloaded``.
    """
    provider = services.gateway.provider("scorer")
    agents = services.settings.served_agents
    paused = services.pause.current()
    problems = services.coordinator.storage.problems()
    return HealthResponse(
        status="degraded" if problems else "ok",
        degraded_causes=problems,
        version=__version__,
        judge_backend=provider.description,
        offline_judge=provider.offline,
        offline_agents=[a for a in agents if services.gateway.provider(a).offline],
        judge_model="offline-rules"
        if provider.offline
        else services.settings.agents.for_agent("scorer").model,
        rubric_version=services.store.current().version,
        counters=dict(services.scorer.counters),
        structured_output={
            agent: StructuredOutputStatus(mode=state.mode, reason=state.reason)
            for agent in agents
            for state in [services.gateway.output_mode(agent)]
        },
        judges={
            agent: JudgeReachability(
                reachable=state.reachable,
                since=datetime.fromtimestamp(state.since, UTC).isoformat(),
                error=state.error,
            )
            for agent, state in (services.judges.states() if services.judges else {}).items()
        },
        auditor=_auditor(services),
        scoring_paused=str(ScoringPausedError(paused)) if paused else None,
    )


def _auditor(services: Services) -> str | None:
    if not services.settings.auditor_on:
        return None
    if services.gateway.provider(AUDITOR).offline:
        return "offline-rules"
    return services.settings.agents.for_agent(AUDITOR).model
