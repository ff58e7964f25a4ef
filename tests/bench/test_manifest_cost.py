"""bench/performance/manifest_cost.py at its smoke size: one build and write of the run
manifest, timed."""

from __future__ import annotations

import re

import pytest

from bench.performance import manifest_cost as bench


def test_the_smoke_run_times_one_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--smoke"])
    printed = capsys.readouterr().out.strip()
    found = re.fullmatch(
        r"build \+ write manifest: median ([\d.]+) ms, max ([\d.]+) ms over 1 runs", printed
    )
    assert found is not None, printed
    assert found.group(1) == found.group(2)  # one run: its median is its maximum
