"""``GET /metrics``: the process's metrics in the Prometheus text format."""

from fastapi import APIRouter
from fastapi.responses import Response

from amaris.metrics import CONTENT_TYPE
from api.deps import ServicesDep
from api.errors import AUTH_ERRORS

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format."},
        **AUTH_ERRORS,
    },
)
async def metrics(services: ServicesDep) -> Response:
    """Requests, judge calls, tokens and errors, rewards, steps and the rubric version.

    Needs the bearer key when ``server.api_key`` is set.
    """
    return Response(services.metrics.exposition(), media_type=CONTENT_TYPE)
