"""``amaris serve``: the API and its pipeline thread, on the Prefect server
:func:`amaris.app.launch.launched` started (Prefect's environment is set before this
module, which imports Prefect, is imported)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

import uvicorn
from prefect.events.worker import EventsWorker
from prefect.logging.handlers import APILogWorker

from amaris.agents.prompts import load_prompts
from amaris.app.connections import uvicorn_config
from amaris.app.launch import Launch
from amaris.app.wiring import build_services, create_app
from amaris.manifest import build_manifest, write_manifest
from amaris.settings import Settings

log = logging.getLogger("amaris")

PREFECT_FLUSH_TIMEOUT_S = 1.5
"""How long Prefect's log and event queues have to reach its server on shutdown."""


def serve(settings: Settings, launch: Launch) -> int:
    """Serve until SIGINT/SIGTERM; then finish in-flight requests (30 s at most) and leave
    running steps resumable (:func:`~amaris.app.launch.launched` then stops the children)."""
    server = launch.server
    try:
        manifest = build_manifest(settings, load_prompts(settings.prompts), "serve")
        path = write_manifest(manifest, settings.memory.path)
        log.info("run manifest %s (config %s)", path, manifest["config_hash"])
        services = build_services(
            settings,
            warm_prefect=True,
            prefect_ready=server.wait_ready if server else None,
            manifest=manifest,
        )
        app = create_app(settings, services=services)
        if server is not None:
            # /healthz answers "ok" only once the step path can run: on a Prefect server
            # that answered (and is amaris's own child: it holds the port).
            server.wait_ready()
        config = uvicorn_config(app, settings)
        # uvicorn drains requests before the app's shutdown: end step waits first, or
        # long polls would hold the drain for up to its 30 s. It handles the signals while
        # it runs, then re-raises the one it got with the handler it found installed.
        launch.signals.serving()
        WaitEndingServer(config, services.coordinator.end_waits).run()
    finally:
        launch.signals.stopping()
        _flush_prefect()
    return 0


def _flush_prefect() -> None:
    """Send the logs and events Prefect still queues (of step runs just cancelled) while its
    server answers: at exit, with the server gone, each queue waits on failed connections."""
    deadline = time.monotonic() + PREFECT_FLUSH_TIMEOUT_S
    for service in (APILogWorker, EventsWorker):
        service.drain_all(timeout=max(0.0, deadline - time.monotonic()))


class WaitEndingServer(uvicorn.Server):
    """uvicorn that calls ``end_waits`` as its shutdown starts, before draining requests."""

    def __init__(self, config: uvicorn.Config, end_waits: Callable[[], None]) -> None:
        super().__init__(config)
        self._end_waits = end_waits

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._end_waits()
        await super().shutdown(sockets)
