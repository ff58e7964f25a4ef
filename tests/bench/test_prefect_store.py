"""bench/performance/prefect_store.py at its smoke size: steps through a real amaris serve and
its own Prefect server, the store sampled after each step into the section's table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench._common import markers
from bench.performance import prefect_store as bench

pytestmark = pytest.mark.slow  # amaris serve and its Prefect server


def test_the_smoke_run_samples_the_store_after_every_step(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    start, end = markers("prefect_store")
    section = text[text.index(start) : text.index(end)]
    assert f"## Prefect's store over {bench.SMOKE_STEPS} steps (retention)" in section
    assert "| steps | on: prefect.db MB | on: runs / events | on: result files |" in section
    rows = re.findall(
        r"^\| (\d+) \| ([\d.]+) \| (\d+) / (\d+) \| (\d+) \(\d+ kB\) \|$", section, re.M
    )
    assert [int(r[0]) for r in rows] == list(range(bench.SMOKE_STEPS + 1))
    assert rows[0][2:] == ("0", "0", "0")  # before the first step: an empty store
    last = rows[-1]
    assert float(last[1]) > 0 and int(last[2]) >= 1 and int(last[3]) > 0 and int(last[4]) > 0
