"""Where a running process of amaris is: a private JSON record of its pid and address,
written when it starts and removed when it stops, so that the commands that talk to it
find it on the port it was given (``amaris serve --port``), not only on the configured one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from amaris.private import open_private

SERVICE_RECORD = "service.json"
"""The record ``amaris serve`` keeps in its data folder: its pid and URL."""


def write_record(path: Path, **fields: str | int) -> None:
    """Record ``fields`` (a ``pid`` among them) at ``path``, mode 0600, replacing a record
    left there."""
    path.unlink(missing_ok=True)
    with os.fdopen(open_private(path, append=False), "w") as out:
        out.write(json.dumps(fields))


def live_record(path: Path) -> dict[str, str] | None:
    """The record at ``path`` while its process runs; None when there is none, it cannot
    be read, or its process is gone (a killed amaris leaves its record behind)."""
    try:
        data = json.loads(path.read_text())
        os.kill(int(data["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None


def drop_record(path: Path) -> None:
    """Remove the record at ``path`` if this process wrote it."""
    record = live_record(path)
    if record is not None and record.get("pid") == str(os.getpid()):
        path.unlink(missing_ok=True)


def recorded_service(data: Path) -> str | None:
    """The URL of the ``amaris serve`` running on the data folder ``data``, if any."""
    record = live_record(data / SERVICE_RECORD)
    return record.get("url") if record else None
