"""bench/probes/slow_bodies.py at its smoke size: unauthenticated slow bodies refused at once,
a keyed body trickled to /score cut off by the body timeout."""

from __future__ import annotations

import re

import pytest

from bench.probes import slow_bodies as bench

pytestmark = pytest.mark.slow  # amaris serve


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_refuses_the_bodies_and_cuts_the_trickle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    connections = bench.SMOKE["connections"]
    assert re.search(
        rf"^slow bodies: RSS before \d+ MB, peak \d+ MB, at 2 s \d+ MB; {connections} answered "
        r"401; [\d.]+ MB of body sent",
        printed,
        re.M,
    ), printed
    trickle = re.search(r"^trickle .*: cut off after ([\d.]+) s \(status (\d+), ", printed, re.M)
    assert trickle is not None, printed
    assert trickle.group(2) == "408"
    assert float(trickle.group(1)) >= bench.SMOKE_BODY_TIMEOUT_S
