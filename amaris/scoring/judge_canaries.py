"""Moved to :mod:`amaris.trust.judge_canaries`; kept for the task results Prefect pickled
under this name (the judge canaries' task returns the report)."""

from __future__ import annotations

from amaris.trust.judge_canaries import JudgeCanaryReport as JudgeCanaryReport
from amaris.trust.judge_canaries import ProbeResult as ProbeResult
