"""bench/probes/slow_heads.py at its smoke size: the keyed probes answer before, during and
after an attack of slow heads, which the head timeout cuts off."""

from __future__ import annotations

import re

import pytest

from bench.probes import slow_heads as bench

pytestmark = pytest.mark.slow  # amaris serve


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_answers_every_probe_during_the_attack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    probes = re.findall(r"^(before|during|after) +\| (.+?) +\| (.+?) +\|", printed, re.M)
    names = ("/score, new connection", "/score, kept-alive", "/healthz, new connection")
    assert {(phase, name) for phase, name, _ in probes} == {
        (phase, name) for phase in ("before", "during", "after") for name in names
    }
    for _, _, answers in probes:
        assert re.fullmatch(r"\d+x 200", answers), answers  # nothing but 200
    attack = re.search(
        r"^attackers: (\d+) connections opened \(0 connect errors\): (.+)$", printed, re.M
    )
    assert attack is not None, printed
    # cut off by the head timeout, each attacker came back on a new connection
    assert int(attack.group(1)) > bench.SMOKE["connections"]
    assert "still open at the end" not in attack.group(2) or "answered" in attack.group(2)
