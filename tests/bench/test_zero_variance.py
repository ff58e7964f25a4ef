"""bench/evaluations/zero_variance.py at its smoke size: ``amaris simulate`` with every
sharper-reward option of ``agents.scorer``, its GRPO groups counted in the section."""

from __future__ import annotations

import re

import pytest

from bench.evaluations import zero_variance as bench

pytestmark = pytest.mark.slow  # amaris simulate starts amaris serve


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_counts_the_groups_of_its_one_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench.main(["--smoke"])
    printed = capsys.readouterr().out
    section = printed[printed.index("<!-- zero_variance:start -->") :]
    rows = re.findall(
        r"^\| (samples .+?) \| (.+?) \| (.+?) \| (.+?) \| ([\d.]+) \| (\d+) \|", section, re.M
    )
    groups = bench.SMOKE["rollouts_per_step"] // bench.SMOKE["group_size"]
    assert len(rows) == 1
    label, every, first, last, mean, unscored = rows[0]
    assert label == f"samples {bench.SMOKE['samples']} + logprobs, temperature 1"
    assert re.fullmatch(rf"\d/{groups} \(\d+%\)", every)
    assert every == first == last  # one step: it is the first and the last
    assert 0.0 <= float(mean) <= 1.0 and unscored == "0"
