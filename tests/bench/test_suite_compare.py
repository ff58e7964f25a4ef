"""bench/performance/suite_compare.py on two small ``pytest --durations=0`` outputs: tests
matched by name across folders, a duplicated name left unmatched, the new tests by folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.performance import suite_compare as bench

OLD = """\
bringing up nodes...
........................................................................ [ 50%]
============================== slowest durations ===============================
3.00s call     tests/app/test_cli.py::test_serve[fast mode]
0.50s setup    tests/app/test_cli.py::test_serve[fast mode]
2.00s call     tests/unit/test_steps.py::test_step_moves
1.00s call     tests/app/test_a.py::test_twin
1.50s call     tests/app/test_b.py::test_twin
0.25s call     tests/app/test_gone.py::test_removed
Traceback (most recent call last):
ValueError: I/O operation on closed file.
(12 durations < 0.005s hidden.  Use -vv to show these durations.)
6 passed, 1 warning in 9.50s (0:00:09)
	Command being timed: "python3 -m pytest --durations=0 -q"
	Elapsed (wall clock) time (h:mm:ss or m:ss): 0:10.02
"""
NEW = """\
0.20s teardown tests/app/test_cli.py::test_serve[fast mode]
4.00s call     tests/app/test_cli.py::test_serve[fast mode]
1.00s call     tests/pipeline/test_steps.py::test_step_moves
2.00s call     tests/app/test_a.py::test_twin
0.75s call     tests/bench/test_new.py::test_added
0.50s setup    tests/bench/test_new.py::test_added
1.25s call     tests/trust/test_more.py::test_other
0.10s call     tests/bench/test_more.py::test_third
=========================== 7 passed in 12.25s (0:00:12) ===========================
"""


def test_the_runs_are_compared_test_by_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text(OLD, encoding="utf-8")
    new.write_text(NEW, encoding="utf-8")
    assert bench.main([str(old), str(new), "--top", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # every listed id's phases summed: 3.5 + 2 + 1 + 1.5 + 0.25; 4.2 + 1 + 2 + 1.25 + 1.25 + 0.1
    assert f"| old (`{old}`) | 6 passed, 1 warning | 6 | 9.50 | 5 | 8.25 |" in lines
    assert f"| new (`{new}`) | 7 passed | 7 | 12.25 | 6 | 9.80 |" in lines
    # test_serve (same file) and test_step_moves (moved folder); test_twin is two tests in old
    matched = lines.index("### Matched by name (unique in each run)")
    assert lines[matched + 4] == "| 2 | 5.50 | 5.20 | -5.5 % |"
    only_new = lines.index("### Only in the new run: 3 tests, 2.60 s")
    assert lines[only_new + 4 : only_new + 7] == [
        "| `tests/bench` | 2 | 1.35 |",
        "| `tests/trust` | 1 | 1.25 |",
        "",
    ]
    only_old = lines.index("### Only in the old run: 1 tests, 0.25 s")
    assert lines[only_old + 4] == "| `tests/app` | 1 | 0.25 |"
    assert (
        "### Left unmatched (name in both runs, not unique in one): "
        "old 2 tests, 2.50 s; new 1 tests, 2.00 s"
    ) in lines
    grown = lines.index("### The 1 matched tests that grew most")
    assert lines[grown + 4 :] == [
        "| `tests/app/test_cli.py::test_serve[fast mode]` | 3.50 | 4.20 | +0.70 |"
    ]


def test_the_smoke_run_compares_two_files_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--smoke"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "| 2 | 5.50 | 5.20 | -5.5 % |" in lines
    assert "### Only in the new run: 2 tests, 2.50 s" in lines
