"""Moved to :mod:`amaris.trust.audit.models`; kept for the task results Prefect pickled
under this name (the audit's task returns the step's audit)."""

from __future__ import annotations

from amaris.agents.blocks import AlarmEvidence as AlarmEvidence
from amaris.agents.blocks import CriterionDisagreement as CriterionDisagreement
from amaris.agents.blocks import DisagreeingRollout as DisagreeingRollout
from amaris.trust.audit.models import Alarm as Alarm
from amaris.trust.audit.models import AuditSummary as AuditSummary
from amaris.trust.audit.models import CriterionTally as CriterionTally
from amaris.trust.audit.models import Fidelity as Fidelity
from amaris.trust.audit.models import RewardGap as RewardGap
from amaris.trust.audit.models import StepAudit as StepAudit
