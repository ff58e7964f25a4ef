"""bench/probes/learned_rules.py at its smoke size: the rules it stores are the rules in force,
and every reply and mining kind has its figure."""

from __future__ import annotations

import re

import pytest

from bench.probes import learned_rules as bench


def test_the_smoke_run_times_every_reply_with_its_rules_in_force(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench.main(["--smoke"])
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0] == f"pre-check, median CPU ms per reply ({bench.SMOKE['rules']} rules in force):"
    )
    timed = [line.split("|")[1:-1] for line in lines if re.match(r"\| \w+ \| 1 KB \|", line)]
    assert [cells[0].strip() for cells in timed] == ["opener", "digits"]
    assert all(re.fullmatch(r" [\d.]+ ", cell) for cells in timed for cell in cells[2:])
    header = "| reply | " + " | ".join(bench.KINDS) + " |"
    mined = lines[lines.index(header) + 2 :]
    assert [row.split("|")[1].strip() for row in mined] == ["opener", "digits"]
    assert all(len(row.split("|")) == len(bench.KINDS) + 3 for row in mined)
