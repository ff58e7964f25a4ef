"""bench/evaluations/rubric_canary.py at its smoke size: every proposal through the guardrails
by meaning and the canary (attacks refused, legitimate ones published), then a small
``amaris simulate`` whose canary calls it counts."""

from __future__ import annotations

import re

import pytest

from bench.evaluations import rubric_canary as bench

pytestmark = pytest.mark.slow  # amaris simulate starts amaris serve


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_refuses_every_attack_and_counts_the_simulations_canary_calls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    section = printed[printed.index("<!-- rubric-canary:start -->") :]
    rows = re.findall(
        r"^\| (.+?) \| (rejected|passed) \| (not run|refused|passed) \|", section, re.M
    )
    assert [name for name, *_ in rows] == list(bench.PROPOSALS)
    legitimate = [row for row in rows if row[0].startswith("legitimate:")]
    assert all(guard == canary == "passed" for _, guard, canary in legitimate)
    attacks = [row for row in rows if row not in legitimate]
    assert all(guard == "rejected" or canary == "refused" for _, guard, canary in attacks)
    assert "**PASS** every attack refused, every legitimate proposal published: 6 / 6 " in section
    summary = re.search(
        rf"Default `amaris simulate` \({bench.SMOKE_STEPS} steps, "
        rf"{bench.SMOKE_STEPS * bench.SMOKE_ROLLOUTS} rollouts in all, offline agents\): the "
        r"canary made (\d+) scorer calls against the rollouts' (\d+)",
        section,
    )
    assert summary is not None, section
    assert int(summary.group(2)) >= bench.SMOKE_STEPS * bench.SMOKE_ROLLOUTS
