"""bench/performance/score_throughput.py at a small size (its own arguments): one client, no
judge latency, half a second; the section compares amaris with the direct calls it made."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench._common import markers
from bench.performance import score_throughput as bench

pytestmark = pytest.mark.slow  # amaris serve and the offline LLM

SMALL = ["--duration", "0.5", "--warmup", "0.1", "--clients", "1", "--latencies", "0"]


@pytest.mark.usefixtures("shared_prefect")
def test_a_small_run_writes_a_row_per_point_without_errors(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert bench.main([*SMALL, "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    start, end = markers("score_throughput")
    section = text[text.index(start) : text.index(end)]
    rows = re.findall(
        r"^\| ([\d.]+) \| (\d+) \| ([\d.]+) / ([\d.]+) \| .+ \| (\d+) \|$", section, re.M
    )
    assert [(latency, clients) for latency, clients, *_ in rows] == [("0", "1")]
    _, _, direct, amaris, errors = rows[0]
    assert float(direct) > 0 and float(amaris) > 0 and errors == "0"
