"""``amaris serve``: the API, its pipeline thread and (by default) a Prefect server."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

from amaris.settings import Settings

log = logging.getLogger("amaris")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_server(settings: Settings) -> int:
    """Serve until SIGINT/SIGTERM; then finish in-flight requests (30 s at most), leave
    running steps resumable and stop the Prefect server child."""
    import uvicorn

    from amaris.logs import configure_logging
    from amaris.prefect_env import configure_prefect
    from amaris.prefect_server import PrefectServer, free_port
    from amaris.service import build_services
    from api.app import create_app

    configure_logging(settings.logging.level)
    configure_prefect(settings)
    server: PrefectServer | None = None
    if not os.environ.get("PREFECT_API_URL"):
        wanted = settings.prefect.port
        port = wanted if wanted is not None and _port_free(wanted) else free_port()
        server = PrefectServer(Path(os.environ["PREFECT_HOME"]), port)
        server.start()
        # Before prefect is imported in this process: its settings read the environment once.
        os.environ["PREFECT_API_URL"] = server.api_url
        log.warning("Prefect UI: %s (step runs, task runs, artifacts)", server.url)
    else:
        log.warning("using the Prefect API at %s", os.environ["PREFECT_API_URL"])
    try:
        services = build_services(
            settings, warm_prefect=True, prefect_ready=server.wait_ready if server else None
        )
        app = create_app(settings, services=services)
        uvicorn.run(app, host=settings.server.host, port=settings.server.port,
                    log_level=settings.logging.level.lower(), timeout_graceful_shutdown=30)
    finally:
        if server is not None:
            server.stop()
    return 0
