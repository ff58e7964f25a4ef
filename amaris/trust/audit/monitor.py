"""The fidelity figures ``/metrics`` shows: the latest audit's, and the alarms counted in
this process."""

from __future__ import annotations

from dataclasses import dataclass

from amaris.trust.audit.models import StepAudit


@dataclass
class FidelityMonitor:
    """Shared by the step path (which records each audit) and ``/metrics`` (which reads)."""

    agreement: float | None = None
    """Kendall's tau of the latest audited step (``amaris_audit_agreement``)."""
    gap: float | None = None
    """Mean absolute reward gap of the latest audited step (``amaris_audit_reward_gap``)."""
    alarms: int = 0
    """Alarms raised (``amaris_fidelity_alarms_total``)."""
    audits: int = 0
    """Steps audited."""

    def record(self, audit: StepAudit) -> None:
        """Count ``audit`` in."""
        self.audits += 1
        self.agreement = audit.agreement
        self.gap = audit.gap
        if audit.alarm is not None:
            self.alarms += 1
