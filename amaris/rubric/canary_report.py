"""Moved to :mod:`amaris.trust.rubric_canary.report`; kept for the task results Prefect
pickled under this name (a step's outcome carries the report). Nothing imports it: the
import contracts let it alone reach up to the trust package (pyproject.toml)."""

from __future__ import annotations

from amaris.trust.rubric_canary.report import CanaryProbe as CanaryProbe
from amaris.trust.rubric_canary.report import CanaryReport as CanaryReport
