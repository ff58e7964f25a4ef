"""bench/performance/group_judging.py at its smoke size: the same GRPO groups scored
pointwise and listwise against the offline judge, through a real amaris serve each."""

from __future__ import annotations

import pytest

from bench.performance import group_judging as bench

pytestmark = pytest.mark.slow  # amaris serve and the offline LLM, twice


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_judges_each_group_in_one_call(capsys: pytest.CaptureFixture[str]) -> None:
    point, listwise = bench.main(["--smoke"])
    rollouts = bench.SMOKE["prompts"] * bench.SMOKE["rollouts"]
    assert (point.mode, listwise.mode) == ("pointwise", "listwise")
    assert point.rollouts == listwise.rollouts == rollouts
    # One call a rollout, against one a group; every rollout of a group judged with it.
    assert point.calls == rollouts and point.listwise == 0
    assert listwise.calls == bench.SMOKE["prompts"] and listwise.listwise == rollouts
    # The rubric and prompt once a group: fewer prompt tokens a rollout.
    assert listwise.per_rollout[0] < point.per_rollout[0]
    assert point.ordered_pairs == listwise.ordered_pairs == 1.0
    printed = capsys.readouterr().out
    assert "| listwise | 8 | 2 |" in printed
