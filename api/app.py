"""The API factory (the app served with its storage and gateway:
:func:`amaris.app.wiring.create_app`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from amaris import __version__
from amaris.metrics import Metrics
from amaris.services import Services
from amaris.settings import Settings, secret_value
from api import errors
from api.middleware import RequestGuard, RequestMetrics
from api.routes import (
    audit,
    health,
    memory,
    metrics,
    openrlhf,
    precheck,
    rubrics,
    score,
    steps,
)

ServicesFactory = Callable[[Metrics], Services]
"""Builds the services (blocking) recording into the given metrics registry."""


def build_api(settings: Settings, services: Services | ServicesFactory) -> FastAPI:
    """Build the amaris API over ``services``.

    Args:
        settings: the validated configuration.
        services: already-built services (the CLI builds them first so start-up errors
            are reported before the server binds), or a factory the app calls at start-up
            (in a thread) with its metrics registry. Closed on shutdown either way.
    """
    # Built before the services so the request middleware can record into it.
    registry = services.metrics if isinstance(services, Services) else Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        built = (
            services
            if isinstance(services, Services)
            else await asyncio.to_thread(services, registry)
        )
        app.state.services = built
        await built.start()
        try:
            yield
        finally:
            await built.stop()

    app = FastAPI(
        title="amaris",
        version=__version__,
        summary="Reward service for RL post-training: rubric-based LLM judging.",
        lifespan=lifespan,
    )
    # The Host, the bearer key (every path but /healthz) and the JSON type of every
    # state-changing request are checked at the edge, before routing and before any body
    # is read: no router needs (or can forget) a dependency for them. No CORS middleware:
    # a page of another origin may read no answer.
    app.add_middleware(
        RequestGuard,
        hosts=settings.server.served_hosts,
        api_key=secret_value(settings.server.api_key),
        max_body_bytes=settings.server.max_body_bytes,
        body_timeout_seconds=settings.server.body_timeout_seconds,
    )
    app.add_middleware(RequestMetrics, metrics=registry)  # added last: outermost
    errors.install(app)
    app.include_router(health.router)
    app.include_router(score.router)
    app.include_router(openrlhf.router)
    app.include_router(rubrics.router)
    app.include_router(steps.router)
    app.include_router(audit.router)
    app.include_router(memory.router)
    app.include_router(metrics.router)
    app.include_router(precheck.router)
    return app
