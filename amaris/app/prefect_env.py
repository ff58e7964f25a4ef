"""Prefect configuration that must be in place before ``prefect`` is imported."""

from __future__ import annotations

import os
from pathlib import Path

from amaris.settings import Settings

RUN_LOGS = {
    "PREFECT_LOGGING_EXTRA_LOGGERS": "amaris",
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
}
"""amaris's log records emitted inside a step's flow and task runs also go to that run's
logs (Prefect's UI); the others (the API's, scoring's) stay local, without a Prefect
warning for each. Read by Prefect when it is imported."""


def configure_prefect(settings: Settings) -> None:
    """Keep Prefect's home (database, results) under the data folder, quietly.

    Values already in the environment win (``PREFECT_HOME``, ``PREFECT_API_URL``),
    so users and tests can point amaris at another Prefect.
    """
    home = Path(settings.memory.path).resolve() / "prefect"
    home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(home))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")
    for name, value in RUN_LOGS.items():
        os.environ.setdefault(name, value)
