"""bench/performance/loop_overhead.py at its smoke size: a simulated trainer's steps with the
step pipeline off and on through a real amaris serve, the section's figures those of its
steps."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench._common import markers
from bench.performance import loop_overhead as bench

pytestmark = pytest.mark.slow  # amaris serve and the offline LLM


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_writes_the_added_time_of_its_steps(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    start, end = markers("loop_overhead")
    section = text[text.index(start) : text.index(end)]
    assert "| steps measured | 1 | 1 |" in section
    means = dict(
        re.findall(r"^\| step wall time, mean \(s\) \| ([\d.]+) \| ([\d.]+) \|$", section, re.M)
    )
    assert len(means) == 1
    [(off, on)] = means.items()
    added = re.search(
        r"\*\*added wall time per step\*\* \| \| \*\*([+-][\d.]+) ms \(([+-][\d.]+)%\)", section
    )
    assert added is not None, section
    assert float(added.group(1)) == pytest.approx((float(on) - float(off)) * 1000, abs=1.5)
    verdict = "PASS" if float(added.group(2)) <= bench.TARGET_OVERHEAD * 100 else "FAIL"
    assert f"**{verdict}** added wall time per step <= 1%: " in section
