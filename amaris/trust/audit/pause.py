"""``audit.on_alarm: pause``: scoring stops on a Goodhart alarm until a person acknowledges
it. The pause is a file in the data folder, so it survives a restart and every process
sharing the folder (the server, a CLI ``amaris audit ack``) sees the same state."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from amaris.rubric.store import write_durably

log = logging.getLogger("amaris.audit")

PAUSE_FILE = "audit-pause.json"
"""Under ``memory.path``."""


class PauseRecord(BaseModel):
    """Why scoring is paused."""

    model_config = ConfigDict(frozen=True)

    step: int
    reason: str
    since: float
    """Unix time the alarm paused scoring."""


class ScoringPausedError(RuntimeError):
    """``/score`` is refused: a fidelity alarm paused scoring."""

    def __init__(self, record: PauseRecord) -> None:
        super().__init__(
            f"scoring paused by the fidelity alarm of step {record.step}: {record.reason}; "
            "acknowledge it with `amaris audit ack` (or POST /audit/ack) to resume"
        )
        self.record = record


class AuditPause:
    """The pause file of one data folder. :meth:`current` costs one ``access`` while the
    file is absent, and a ``stat`` more while it is unchanged (it is on the ``/score``
    path)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / PAUSE_FILE
        self._seen: tuple[int, int] | None = None
        self._record: PauseRecord | None = None

    def current(self) -> PauseRecord | None:
        """The pause in force, None when scoring runs."""
        # ``access`` answers "absent" (the usual case, on every /score) without the
        # exception a ``stat`` of a missing file raises; a file removed in between is
        # absent all the same.
        try:
            stat = os.stat(self.path) if os.access(self.path, os.F_OK) else None
        except FileNotFoundError:
            stat = None
        if stat is None:
            self._seen, self._record = None, None
            return None
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            self._record = self._read()
            self._seen = seen
        return self._record

    def check(self) -> None:
        """Raises :class:`ScoringPausedError` while paused."""
        record = self.current()
        if record is not None:
            raise ScoringPausedError(record)

    def pause(self, step: int, reason: str) -> PauseRecord:
        """Pause scoring (durably) for the alarm of ``step``."""
        record = PauseRecord(step=step, reason=reason, since=time.time())
        write_durably(self.path, record.model_dump_json())
        log.error("scoring PAUSED by the fidelity alarm of step %s: %s", step, reason)
        return record

    def ack(self) -> PauseRecord | None:
        """Resume scoring; the pause acknowledged, None when there was none."""
        record = self.current()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return None
        self._seen, self._record = None, None
        log.warning("fidelity alarm acknowledged: scoring resumes")
        return record

    def _read(self) -> PauseRecord:
        try:
            return PauseRecord.model_validate(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError) as exc:
            # An unreadable pause file still pauses: failing open would serve the reward
            # the alarm stopped.
            return PauseRecord(step=-1, reason=f"unreadable pause file {self.path}: {exc}", since=0)
