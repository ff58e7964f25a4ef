"""bench/probes/schema_fuzz.py at its smoke size: one case per operation and mode against a
real amaris serve; no 5xx, no refused request that changed state, none hung."""

from __future__ import annotations

import re

import pytest

from bench.probes import schema_fuzz as bench

pytestmark = pytest.mark.slow  # amaris serve and the offline LLM


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_changes_nothing_on_a_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    operations = re.findall(
        r"^\| `(\w+ /\S*)` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", printed, re.M
    )
    assert len(operations) > 10
    assert all(int(cases) >= 1 for _, cases, *_ in operations)
    total = re.search(
        rf"^\| {len(operations)} \| (\d+) \| \d+ \| \d+ \| (\d+) \| (\d+) \| (\d+) \| ",
        printed,
        re.M,
    )
    assert total is not None, printed
    assert total.group(1) == str(sum(int(op[1]) for op in operations))
    errors, hung, changed = total.group(2, 3, 4)
    verdict = "PASS" if errors == changed == hung == "0" else "FAIL"
    assert (
        f"**{verdict}** no 5xx, no state changed by a refused request, no hung request: " in printed
    )
