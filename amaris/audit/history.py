"""The audits the step registry keeps (each step record's ``audit`` field)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from amaris.audit.models import StepAudit
from amaris.memory.rollout_log import StepRegistry

log = logging.getLogger("amaris.audit")


def audit_of(record: Mapping[str, Any] | None) -> StepAudit | None:
    """The audit a registry record keeps (JSON of :class:`StepAudit`); None without one,
    or when it does not read (logged)."""
    stored = (record or {}).get("audit")
    if not stored:
        return None
    try:
        return StepAudit.model_validate(stored)
    except ValidationError as exc:
        log.warning("step %s: stored audit unreadable: %s", (record or {}).get("step"), exc)
        return None


def audit_history(registry: StepRegistry, before: int) -> list[StepAudit]:
    """The audits of the steps before ``before``, oldest first."""
    found = []
    for record in registry.list():
        if int(record["step"]) < before:
            audit = audit_of(record)
            if audit is not None:
                found.append(audit)
    return found
