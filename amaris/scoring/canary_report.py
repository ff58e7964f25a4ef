"""Moved to :mod:`amaris.rubric.canary_report` (a step's outcome carries the report, below
this layer); importable here still, for the importers and the task results Prefect pickled
under this name."""

from __future__ import annotations

from amaris.rubric.canary_report import PASS_AT as PASS_AT
from amaris.rubric.canary_report import SAID_LIFT as SAID_LIFT
from amaris.rubric.canary_report import CanaryProbe as CanaryProbe
from amaris.rubric.canary_report import CanaryReport as CanaryReport
from amaris.rubric.canary_report import CanaryRollout as CanaryRollout
from amaris.rubric.canary_report import Kind as Kind
from amaris.rubric.canary_report import Side as Side
from amaris.rubric.canary_report import decide as decide
