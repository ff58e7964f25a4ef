"""bench/evaluations/alarm_stream.py at its smoke size: a row per auditor noise and swap-check
setting, each counting every seed once, the figures those of the stream it runs."""

from __future__ import annotations

import pytest

from amaris.settings import AuditSettings
from bench.evaluations import alarm_stream as bench


def test_the_smoke_run_prints_a_row_per_setting_counting_every_seed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--smoke"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 0.")]
    assert len(rows) == len(bench.NOISES) * len(bench.BLIND)
    seeds = bench.SMOKE_SEEDS
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert sum(int(c) for c in cells[2:7]) == seeds  # at the drift .. never
        fired, _, steps = cells[7].split()
        assert int(steps) == 20 * seeds and 0 <= int(fired) <= int(steps)
        assert cells[8] == f"{cells[8].split()[0]} of {seeds}"
    first = dict(zip(("0", "1", "2", "3", "never"), rows[0].split("|")[3:8], strict=True))
    found = bench.delays(seeds, bench.NOISES[0], bench.BLIND[0], AuditSettings())
    assert {k: int(v) for k, v in first.items()} == {k: found[k] for k in first}
