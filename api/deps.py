"""Dependencies shared by the routes. (The bearer key is checked before routing, by
:class:`api.middleware.RequestGuard`, for every path but /healthz.)"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from amaris.services import Services

# `async def` although it does no I/O: FastAPI runs a plain `def` dependency in a worker
# thread, a thread round-trip per request on the hot path.


async def get_services(request: Request) -> Services:
    """The process's services, built at start-up."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]
