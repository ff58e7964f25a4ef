"""bench/evaluations/rule_criteria.py at its smoke size: ``amaris simulate`` under the rubric
holding every rule criterion, its judge calls counted from the run's metrics."""

from __future__ import annotations

import re

import pytest

from bench.evaluations import rule_criteria as bench

pytestmark = pytest.mark.slow  # amaris simulate starts amaris serve


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_counts_the_verdicts_the_rules_gave(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--smoke"]) == 0
    rows = re.findall(
        r"^\| ([\w ]+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \|$",
        capsys.readouterr().out,
        re.M,
    )
    assert len(rows) == 1
    label, scored, judged, rule_only, degenerate, _, by_rules = rows[0]
    assert label == bench.SMOKE_RUBRIC
    rollouts = bench.SMOKE["steps"] * bench.SMOKE["rollouts_per_step"]
    assert int(scored) + int(degenerate) == rollouts
    assert int(judged) + int(rule_only) == int(scored)
    assert float(by_rules) > 0  # two of its three criteria are rules
