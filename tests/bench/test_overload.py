"""bench/probes/overload.py at its smoke size: open-loop load at 0.5x, 4x and 0.5x the judge's
capacity through a real amaris serve; the excess refused with 429 and Retry-After, every
request answered, each verdict in the section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench._common import markers
from bench.probes import overload as bench

pytestmark = pytest.mark.slow  # amaris serve, the offline LLM and the prober


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_refuses_the_excess_and_answers_every_request(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    bench.main(["--smoke", "--out", str(out)])
    text = out.read_text(encoding="utf-8")
    start, end = markers("overload")
    section = text[text.index(start) : text.index(end)]
    phases = re.findall(
        r"^\| \((\w)\) \| ([\d.]+)x \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", section, re.M
    )
    assert [(name, load) for name, load, *_ in phases] == [("a", "0.5"), ("b", "4"), ("c", "0.5")]
    assert float(phases[1][4]) > 0  # at 4x the judge's capacity, some are refused
    verdicts = re.findall(r"^- \*\*(PASS|FAIL|INCONCLUSIVE[^*]*)\*\* (.+)$", section, re.M)
    assert len(verdicts) == 6
    measured = {target.split(":", 1)[1].strip(): outcome for outcome, target in verdicts}
    assert any("0 without Retry-After" in m for m in measured)
    assert any(m.endswith("other: 0; unanswered: 0.") for m in measured)
