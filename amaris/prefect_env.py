"""Prefect configuration that must be in place before ``prefect`` is imported."""

from __future__ import annotations

import os
from pathlib import Path

from amaris.settings import Settings


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
