"""The app factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from amaris import __version__
from amaris.llm.providers import ChatProvider
from amaris.memory.embedder import Embedder
from amaris.metrics import Metrics
from amaris.service import Services, build_services
from amaris.settings import Settings
from api import errors
from api.middleware import RequestGuard, RequestMetrics
from api.routes import health, memory, metrics, openrlhf, rubrics, score, steps


def create_app(
    settings: Settings,
    *,
    qdrant_location: str | None = None,
    providers: dict[str, ChatProvider] | None = None,
    services: Services | None = None,
    embedder: Embedder | None = None,
) -> FastAPI:
    """Build the amaris API. Storage opens and the rubric initialises at start-up.

    Args:
        settings: the validated configuration.
        qdrant_location: ``":memory:"`` to keep Qdrant in memory (tests).
        providers: chat providers per agent; default from the configuration.
        embedder: the memory embedder; default from ``memory.embedding_model``.
        services: already-built services (the CLI builds them first so start-up errors
            are reported before the server binds); closed on shutdown.
    """
    # Built before the services so the request middleware can record into it.
    registry = services.metrics if services is not None else Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal services
        if services is None:
            services = await asyncio.to_thread(
                build_services, settings, qdrant_location=qdrant_location, providers=providers,
                embedder=embedder, metrics=registry,
            )
        app.state.services = services
        await services.start()
        try:
            yield
        finally:
            await services.stop()

    app = FastAPI(
        title="amaris",
        version=__version__,
        summary="Reward service for RL post-training: rubric-based LLM judging.",
        lifespan=lifespan,
    )
    # The bearer key is checked at the edge, for every path but /healthz, before routing
    # and before any body is read: no router needs (or can forget) an auth dependency.
    app.add_middleware(RequestGuard, api_key=settings.server.api_key,
                       max_body_bytes=settings.server.max_body_bytes,
                       body_timeout_seconds=settings.server.body_timeout_seconds)
    app.add_middleware(RequestMetrics, metrics=registry)  # added last: outermost
    errors.install(app)
    app.include_router(health.router)
    app.include_router(score.score_router)
    app.include_router(score.router)
    app.include_router(openrlhf.router)
    app.include_router(rubrics.router)
    app.include_router(steps.router)
    app.include_router(memory.router)
    app.include_router(metrics.router)
    return app
