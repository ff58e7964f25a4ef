"""bench/probes/kill_trial.py at its smoke size: ``kill -9`` of a real amaris serve at each kind
of moment, a restart on the same data each time; no acknowledged rollout lost, no step with
two rubric versions."""

from __future__ import annotations

import re

import pytest

from bench.probes import kill_trial as bench

pytestmark = pytest.mark.slow  # amaris serve (restarted) and the offline LLM


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_loses_nothing_it_acknowledged(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--smoke"]) == 0  # nothing lost, at most one version a step
    printed = capsys.readouterr().out
    kills = len(bench.SMOKE_KINDS)  # one kill of each kind
    trials = re.findall(
        r"^kill +(\d+): (\w+) +step +\d+ .+; (\d+) acknowledged, (\d+) lost;", printed, re.M
    )
    assert [int(n) for n, *_ in trials] == list(range(1, kills + 1))
    assert {lost for *_, lost in trials} == {"0"}
    acknowledged = [int(a) for _, _, a, _ in trials]
    assert acknowledged == sorted(acknowledged) and acknowledged[-1] > 0
    assert re.search(rf"^\| kills \(phase at the kill\) \| {kills} \(", printed, re.M)
    assert re.search(r"^\| acknowledged rollouts lost: .+ \| 0 / 0 \| 0 \|$", printed, re.M)
