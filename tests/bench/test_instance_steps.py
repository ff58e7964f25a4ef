"""bench/performance/instance_steps.py at its smoke size: a per_instance step over distinct
prompts through a real amaris serve, with what it left in its Prefect store (the suite's
server's) and result files."""

from __future__ import annotations

import ast
import re

import pytest

from bench.performance import instance_steps as bench

pytestmark = pytest.mark.slow  # amaris serve and the offline LLM


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_completes_one_rubric_per_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    prompts = bench.SMOKE["prompts"]
    found = re.search(
        rf"^per_instance: {prompts} prompts logged in [\d.]+ s; step (\w+) in [\d.]+ s; "
        r"(-?\d+) task runs; prefect.db \+[\d.]+ MB; result files \+(-?\d+) \(\+[\d.]+ MB\); "
        r"peak RSS \d+ MB; scopes (\{.*\})$",
        printed,
        re.M,
    )
    assert found is not None, printed
    status, runs, files, scopes = found.groups()
    assert status in ("updated", "unchanged")  # final: neither pending nor failed
    assert int(runs) > 0 and int(files) > 0
    assert sum(ast.literal_eval(scopes).values()) == prompts  # a rubric scope per prompt
