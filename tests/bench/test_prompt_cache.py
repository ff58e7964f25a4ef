"""bench/performance/prompt_cache.py at its smoke size: every call of the step scored and
recorded, the shares those of the recorded calls, the verdict that of the grouped prompts."""

from __future__ import annotations

import re

import pytest

from bench.performance import prompt_cache as bench


def test_the_shared_prefix_is_counted_in_bytes_of_the_later_call() -> None:
    assert bench.common_prefix(b"abcdef", b"abcxyz") == 3
    assert bench.common_prefix(b"abc", b"abc") == 3
    assert bench.common_prefix(b"", b"abc") == 0
    found = bench.shares([b"aaaa", b"aabb", b"aabbcc"])
    assert found["share"] == pytest.approx((2 + 4) / (4 + 6))
    assert found["min"] == pytest.approx(0.5)


def test_the_smoke_run_reports_the_shares_of_every_recorded_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench.main(["--smoke"])
    printed = capsys.readouterr().out
    calls = 8 * bench.SMOKE_GROUPS
    progress = re.findall(
        r"^(\w+) +(\w+) +calls=(\d+) scored=(\d+) shared=([\d.]+)%", printed, re.M
    )
    assert [(o, k) for o, k, *_ in progress] == [
        ("grouped", "prompt"),
        ("grouped", "body"),
        ("shuffled", "prompt"),
        ("shuffled", "body"),
    ]
    assert {(c, s) for _, _, c, s, _ in progress} == {(str(calls), str(calls))}
    assert printed.count(f"| {calls} |") == 4  # the section's table, a row per line above
    grouped = float(progress[0][4]) / 100
    verdict = "PASS" if grouped >= bench.TARGET_SHARE else "FAIL"
    assert f"**{verdict}** at least 80% of the rendered prompt" in printed
    assert f"{calls} rollouts ({bench.SMOKE_GROUPS} GRPO groups of 8" in printed
