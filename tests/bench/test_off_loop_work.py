"""bench/performance/off_loop_work.py at its smoke size: one row, the worst family of every
step of /score's text work, and the bounds it measures against."""

from __future__ import annotations

import re

import pytest

from amaris.llm.providers import OFFLINE_ON_LOOP_CHARS
from amaris.text.offload import OFF_LOOP_CHARS
from bench.performance import off_loop_work as bench
from tests.support.degenerate import FAMILIES


def test_the_smoke_run_names_the_worst_family_of_each_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench.main(["--smoke"])
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0]
        == f"OFF_LOOP_CHARS={OFF_LOOP_CHARS}, OFFLINE_ON_LOOP_CHARS={OFFLINE_ON_LOOP_CHARS}"
    )
    rows = [line for line in lines if re.match(r"\| [\d,]+ \|", line)]
    assert [row.split("|")[1].strip() for row in rows] == ["64"]
    cells = [c.strip() for c in rows[0].strip("|").split("|")[1:]]
    assert len(cells) == 4
    for cell in cells[:3]:
        family = re.fullmatch(r"[\d.]+ ms \((\w+)\)", cell)
        assert family is not None and family.group(1) in FAMILIES, cell
    judge = re.fullmatch(r"[\d.]+ ms \((\w+), (\d+)\)", cells[3])
    assert judge is not None and judge.group(1) in FAMILIES
    assert int(judge.group(2)) > 64  # the judge reads the reply with the question and rubric
