"""bench/evaluations/structured_output.py at its smoke size: one rollout judged by the real
small model through the reasoning-style endpoint, without the repeat penalty; every request
the server decoded is counted, and the rollout is scored or has its reason."""

from __future__ import annotations

import re

import pytest

from bench.evaluations import structured_output as bench

pytestmark = pytest.mark.real_model  # the real-model server in a process of its own


@pytest.mark.usefixtures("prefect_harness")
def test_the_smoke_run_counts_what_the_server_decoded(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--smoke"])
    printed = capsys.readouterr().out
    row = re.search(
        rf"^\| `{re.escape(bench.SMOKE_MODE)}` \| (\d)/1 \((\d+)%\) \| (.+?) \| (\d+) \| (\d+) \|",
        printed,
        re.M,
    )
    assert row is not None, printed
    scored, _, unscored, requests, tokens = row.groups()
    assert (scored == "1") == (unscored == "-")  # scored, or unscored with its reason
    assert 1 <= int(requests) <= 2  # the request, and at most one corrective re-ask
    assert 0 < int(tokens) <= int(requests) * bench.SMOKE_MAX_TOKENS
