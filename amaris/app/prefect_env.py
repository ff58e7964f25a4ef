"""Prefect configuration that must be in place before ``prefect`` is imported."""

from __future__ import annotations

import os
from pathlib import Path

from amaris.private import check_own_file, private_folder
from amaris.settings import Settings

RUN_LOGS = {
    "PREFECT_LOGGING_EXTRA_LOGGERS": "amaris",
    "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
}
"""amaris's log records emitted inside a step's flow and task runs also go to that run's
logs (Prefect's UI); the others (the API's, scoring's) stay local, without a Prefect
warning for each. Read by Prefect when it is imported."""

LOADED_FROM_HOME = {
    "logging.yml": ("PREFECT_LOGGING_CONFIG_PATH", "PREFECT_LOGGING_SETTINGS_PATH"),
    "profiles.toml": ("PREFECT_PROFILES_PATH",),
}
"""Files Prefect loads from its home unless these variables point elsewhere: its logging
configuration goes to ``logging.config.dictConfig`` (whose ``'()'`` key calls any
callable), its profiles set its API URL and database. File name -> the variables that move it."""


def configure_prefect(settings: Settings) -> None:
    """Keep Prefect's home (database, results) under the data folder, quietly, and its
    server's vacuum in step with amaris's retention (:func:`retention_env`).

    Values already in the environment win (``PREFECT_HOME``, ``PREFECT_API_URL``),
    so users and tests can point amaris at another Prefect.

    Raises:
        UnsafeFolderError: the home, or a file Prefect loads from it (:data:`LOADED_FROM_HOME`),
            is another user's or writable by others: Prefect would run what they wrote.
    """
    home = Path(settings.memory.path).resolve() / "prefect"
    private_folder(home)
    os.environ.setdefault("PREFECT_HOME", str(home))
    used = Path(os.environ["PREFECT_HOME"])
    for default, names in LOADED_FROM_HOME.items():
        chosen = [os.environ[name] for name in names if os.environ.get(name)]
        check_own_file(Path(chosen[0]) if chosen else used / default)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")
    for name, value in RUN_LOGS.items():
        os.environ.setdefault(name, value)
    for name, value in retention_env(settings).items():
        os.environ.setdefault(name, value)


def retention_env(settings: Settings) -> dict[str, str]:
    """The settings of the Prefect server's database vacuum that carry amaris's retention
    (``prefect.retention_hours``, ``prefect.retention_interval_seconds``); empty when it is off.

    Its events vacuum deletes events older than the events retention; its orphan vacuum, the
    artifacts (and any logs left) of the flow runs amaris deleted. Its flow-run vacuum stays
    off: it deletes every terminal run past an age, a failed step's awaiting repair
    included; amaris deletes runs itself (:mod:`amaris.app.retention`).
    """
    prefect = settings.prefect
    if not prefect.retention_on:
        return {}
    every = f"{prefect.retention_interval_seconds:g}"
    env = {
        "PREFECT_SERVER_SERVICES_DB_VACUUM_ENABLED": "events,orphans",
        "PREFECT_SERVER_SERVICES_DB_VACUUM_LOOP_SECONDS": every,
        "PREFECT_SERVER_SERVICES_DB_VACUUM_ORPHAN_CLEANUP_LOOP_SECONDS": every,
    }
    if prefect.retention_hours is not None:
        # An ISO 8601 duration: this setting of Prefect's does not read plain seconds.
        seconds = max(1, round(prefect.retention_hours * 3600))
        env["PREFECT_SERVER_EVENTS_RETENTION_PERIOD"] = f"PT{seconds}S"
    return env
