"""bench/performance/step_pipeline.py at a small size (its own arguments): a step of two
rollouts through the real pipeline (on the suite's Prefect server, whose database gives the
step's task runs), the section's call counts those the configuration implies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench._common import markers
from bench.performance import step_pipeline as bench

pytestmark = pytest.mark.slow  # amaris serve and the offline LLM

SMALL = [
    "--rollouts",
    "2",
    "--latency-ms",
    "0",
    "--probe-requests",
    "2",
    "--probe-concurrency",
    "1",
]


@pytest.mark.usefixtures("shared_prefect")
def test_a_small_run_makes_the_llm_calls_its_configuration_implies(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert bench.main([*SMALL, "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    start, end = markers("step_pipeline")
    section = text[text.index(start) : text.index(end)]
    verdicts = re.findall(r"^- \*\*(PASS|FAIL)\*\* (.+?): (.+)\.$", section, re.M)
    assert len(verdicts) == 3
    calls = verdicts[2]
    assert calls[0] == "PASS", calls  # every agent made the calls the configuration implies
    for made, expected in re.findall(r"\w+ (\d+)/(\d+)", calls[2]):
        assert made == expected
