"""bench/performance/sigterm.py at its smoke size: SIGTERM to a real amaris serve during its
start-up and with a client waiting on a running step; it exits and leaves nothing behind."""

from __future__ import annotations

import re

import pytest

from bench.performance import sigterm as bench

pytestmark = pytest.mark.slow  # amaris serve, its Prefect server and the offline LLM


def test_the_smoke_run_reports_each_trials_exit(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    rows = re.findall(
        r"^\| ([\w.]+) \| [\d.]+ \| ([\d.]+) \| ([\d.]+) \| (-?\d+|None) \| (\d+) \| (.+?) \|$",
        printed,
        re.M,
    )
    assert [row[0] for row in rows] == bench.SMOKE_MOMENTS.split(",")
    for _, exit_s, worst, code, left, _ in rows:
        assert exit_s == worst and code != "None"  # exited before the deadline
        assert left == "0"  # its Prefect server and repair worker went with it
    assert rows[0][5] == "-" and rows[1][5] != "no answer"  # the waiter got an answer
    worst = max(float(row[1]) for row in rows)
    verdict = "PASS" if worst <= bench.TARGET_EXIT_S else "FAIL"
    assert f"**{verdict}** exit within 5 s at every moment, nothing left: " in printed
