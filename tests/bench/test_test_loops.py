"""bench/performance/test_loops.py at its smoke size: both loops run pytest (over one small
file), their summaries and the real-model tier's share written to the section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench._common import markers
from bench.performance import test_loops as bench

pytestmark = pytest.mark.slow  # pytest in processes of its own


def test_the_smoke_run_writes_both_loops_summaries(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    bench.main(["--smoke", "--out", str(out)])
    text = out.read_text(encoding="utf-8")
    start, end = markers("test_loops")
    section = text[text.index(start) : text.index(end)]
    rows = re.findall(r"^\| (`pytest.*?`) \| \d+ s \| (.+?) \| (.+?) \|", section, re.M)
    assert [row[0] for row in rows] == ['`pytest -m "not slow"`', "`pytest`"]
    for _, summary, tier in rows:
        assert re.fullmatch(r"\d+ passed in [\d.]+s( \(\d+:\d+:\d+\))? \(exit 0\)", summary), (
            summary
        )
        assert tier == "not run"  # the small file holds no real-model test
