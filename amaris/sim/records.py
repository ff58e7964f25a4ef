"""The rollout log as records: one step's, a whole run's, and JSONL in and out.

A record is what ``/score`` logged for one rollout (``amaris.scoring.reward.log_record`` plus
``step``, ``time``, ``late`` and ``seq``). Once a step is past
``memory.rollout_retention_steps`` its records live in ``<memory.path>/rollouts/
step-NNNNNN.jsonl`` instead of the log; :func:`step_records` reads either.
``amaris export`` writes records as JSONL; ``amaris replay`` reads them back
(:func:`read_recorded`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from amaris.jsonfile import JSONDict
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_backend import open_rollout_log
from amaris.memory.rollout_log import StepRegistry, step_records
from amaris.models import Rollout

if TYPE_CHECKING:
    from qdrant_client import QdrantClient

    from amaris.settings import Settings


class RecordsError(ValueError):
    """A records file cannot be read; the message names the line and the field."""


def local_records(client: QdrantClient, settings: Settings) -> Iterator[RolloutRecord]:
    """Every record of the run in an opened store, by step then sequence number (its
    :meth:`~RolloutRecord.to_json` is the JSON the log holds, older versions' fields too)."""
    log = open_rollout_log(settings, client)
    try:
        for entry in StepRegistry(client, settings.memory.collection).list():
            yield from step_records(log, settings.memory.path, entry.step)
    finally:
        log.close()


class RecordedRollout(BaseModel):
    """One line of a records file, as ``amaris replay`` needs it (other fields ignored)."""

    model_config = ConfigDict(extra="ignore")

    step: int = Field(ge=0, description="Training step the rollout belonged to.")
    rollout: Rollout
    metadata: JSONDict = Field(default_factory=dict)  # the rollout's trainer metadata
    late: bool = Field(default=False, description="Arrived after its step completed.")

    @property
    def behaviour(self) -> str:
        """The simulated behaviour (``rollout.metadata.sim_behaviour``), else ``all``."""
        label = (self.rollout.metadata or {}).get("sim_behaviour")
        return str(label) if label else "all"


def read_recorded(path: Path) -> list[RecordedRollout]:
    """The rollouts of a records file, late ones left out (they were never analysed).

    Raises:
        RecordsError: unreadable file, a line that is not JSON or misses a field (named),
            or no rollout at all.
    """
    try:
        # "\n" only: `amaris export` writes U+2028 and the like raw, not as line breaks.
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except OSError as exc:
        raise RecordsError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    found: list[RecordedRollout] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = RecordedRollout.model_validate_json(line)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'line'}: {err['msg']}"
                for err in exc.errors()
            )
            raise RecordsError(f"{path} line {number}: {problems}") from exc
        if not record.late:
            found.append(record)
    if not found:
        raise RecordsError(f"{path}: no rollout to replay")
    return found
