"""Dependencies shared by the routes."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

from amaris.service import Services

# Both dependencies are `async def` although they do no I/O: FastAPI runs a plain `def`
# dependency in a worker thread, two thread round-trips per request on the hot path.


async def get_services(request: Request) -> Services:
    """The process's services, built at start-up."""
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def require_api_key(request: Request, services: ServicesDep) -> None:
    """Bearer-key check, active when ``server.api_key`` is set."""
    check_api_key(request, services.settings.server.api_key)


def check_api_key(request: Request, expected: str | None) -> None:
    """Raise 401 unless ``expected`` is unset or the request bears it."""
    if not expected:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip(), expected):
        raise HTTPException(
            status_code=status.HTTP_401_UNAUTHORIZED,
            detail="missing or wrong bearer key in the Authorization header",
            headers={"WWW-Authenticate": "Bearer"},
        )
