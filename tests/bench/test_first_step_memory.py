"""bench/performance/first_step_memory.py at its smoke size: one cold start, a step, and the
durations of the step's memory tasks read from the database of the Prefect server amaris used
(the suite's), written to the section it names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench._common import markers
from bench.performance import first_step_memory as bench

pytestmark = pytest.mark.slow  # amaris serve and the offline LLM


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_writes_the_durations_of_the_steps_memory_tasks(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    start, end = markers(f"first_step_memory {bench.DEFAULT_LABEL}")
    section = text[text.index(start) : text.index(end)]
    assert "| | run 1 | median |" in section
    durations = {
        name: float(value)
        for name, value in re.findall(r"^\| ([^|]+?) \| ([\d.]+) s \| [\d.]+ s \|$", section, re.M)
    }
    assert set(durations) == {
        "start (until /healthz)", "step 0 wall time", "step-0 flow run", *bench.TASKS
    }, section  # fmt: skip
    # the memory tasks ran inside the step's flow run
    assert all(durations[task] <= durations["step-0 flow run"] for task in bench.TASKS)
    verdict = "PASS" if durations["retrieve-memory"] < bench.TARGET_RETRIEVE_S else "FAIL"
    assert f"**{verdict}** the first step's retrieve-memory < 1 s (median): " in section
