"""bench/probes/master_keys.py at its smoke size: the pre-check is what keeps master keys at
the floor against a gullible judge, and no short correct answer is taken for one."""

from __future__ import annotations

import pytest

from bench.probes import master_keys as bench


@pytest.mark.usefixtures("prefect_harness")
def test_the_smoke_run_finds_master_keys_paid_only_without_the_precheck(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--smoke"]) == 0
    rows = {
        tuple(cells[:2]): tuple(cells[2:])
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| ") and not line.startswith("| judge")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    keys, answers = bench.SMOKE_KEYS, bench.SMOKE_ANSWERS
    none, short = f"0/{keys} (0%)", f"0/{answers}"
    assert rows == {
        ("offline (default)", "on"): (none, short),
        ("offline (default)", "off"): (none, short),
        ("gullible (every verdict 4)", "on"): (none, short),
        ("gullible (every verdict 4)", "off"): (f"{keys}/{keys} (100%)", short),
    }
