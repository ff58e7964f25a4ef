"""The audits the step registry keeps (each step record's ``audit`` field)."""

from __future__ import annotations

import logging

from pydantic import ValidationError

from amaris.memory.models import StepRecord
from amaris.memory.rollout_log import StepRegistry
from amaris.trust.audit.models import StepAudit

log = logging.getLogger("amaris.audit")


def audit_of(record: StepRecord | None) -> StepAudit | None:
    """The audit a registry record keeps (JSON of :class:`StepAudit`); None without one,
    or when it does not read (logged)."""
    if record is None or not record.audit:
        return None
    try:
        return StepAudit.model_validate(record.audit)
    except ValidationError as exc:
        log.warning("step %s: stored audit unreadable: %s", record.step, exc)
        return None


def audit_history(registry: StepRegistry, before: int) -> list[StepAudit]:
    """The audits of the steps before ``before``, oldest first."""
    found = []
    for record in registry.list():
        if record.step < before:
            audit = audit_of(record)
            if audit is not None:
                found.append(audit)
    return found
