"""bench/performance/reward_call_cpu.py at a small size (its own arguments): every kind of
reward call, as a trainer makes it, against a real amaris serve."""

from __future__ import annotations

import re

import pytest

from bench.performance import reward_call_cpu as bench

pytestmark = pytest.mark.slow  # amaris serve and the offline LLM


@pytest.mark.usefixtures("shared_prefect")
def test_a_small_run_times_every_kind_of_call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AMARIS_URL", "")  # the script points the adapters at its server
    bench.main(["--calls", "8", "--concurrency", "2"])
    timed = re.findall(
        r"^  ([\w.-]+) +(\d+) calls +[\d.]+ calls/s +[\d.]+ ms CPU a call",
        capsys.readouterr().out,
        re.M,
    )
    assert timed == [
        ("httpx.get", "8"),
        ("client", "8"),
        ("verl", "8"),
        ("verl-async", "8"),
        ("openrlhf", "1"),
    ]
