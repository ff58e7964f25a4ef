"""Moved to :mod:`amaris.trust.rubric_canary.report`; kept for the task results Prefect
pickled under this name (a step's outcome carries the report)."""

from __future__ import annotations

from amaris.trust.rubric_canary.report import CanaryProbe as CanaryProbe
from amaris.trust.rubric_canary.report import CanaryReport as CanaryReport
