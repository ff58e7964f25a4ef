"""The simulator's honest but noisy auditor (amaris.sim.noisy_judge): the offline judge's
verdicts, a seeded share of them read the other way, the same whatever the order."""

from __future__ import annotations

import asyncio
import json

import pytest

from amaris.agents.prompts import agent_messages
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.sim.drift import scenario_overrides
from amaris.sim.noisy_judge import NoisyJudge, disagrees, read_other_way

CRITERIA = [
    {"id": "C1", "text": "The response states the final answer.", "kind": "requirement"},
    {"id": "C2", "text": "The response is concise.", "kind": "requirement"},
    {"id": "C3", "text": "The response offers several candidate answers.", "kind": "pitfall"},
]


def _scores(judge: NoisyJudge, output: str) -> dict[str, int]:
    rollout = {"input": "What is 2 + 2?", "supplemental_context": "4", "output": output}
    messages = agent_messages("scorer", "judge", {"criteria": CRITERIA}, {"rollout": rollout})
    reply = asyncio.run(judge({"messages": messages}))
    return {v["id"]: v["score"] for v in json.loads(reply.content or "")["verdicts"]}


def test_a_disagreement_reads_the_verdict_the_other_way() -> None:
    assert read_other_way(SCALE_MIN) == SCALE_MAX
    assert read_other_way(1) == SCALE_MAX
    assert read_other_way(SCALE_MAX) == SCALE_MIN
    assert read_other_way(3) == SCALE_MIN


def test_at_rate_zero_it_is_the_honest_judge_and_at_one_it_reads_every_verdict_the_other_way() -> (
    None
):
    reply = "2 + 2 = 4. The answer is 4."
    honest = _scores(NoisyJudge(seed=0, rate=0.0), reply)
    contrary = NoisyJudge(seed=0, rate=1.0)
    assert _scores(contrary, reply) == {k: read_other_way(v) for k, v in honest.items()}
    assert (contrary.verdicts, contrary.flipped) == (3, 3)


def test_the_share_read_the_other_way_is_the_rate_and_each_draw_is_repeatable() -> None:
    draws = [
        disagrees(7, f"reply {i}", criterion["text"], 0.1)
        for i in range(1000)
        for criterion in CRITERIA
    ]
    assert sum(draws) / len(draws) == pytest.approx(0.1, abs=0.02)
    again = [
        disagrees(7, f"reply {i}", criterion["text"], 0.1)
        for i in reversed(range(1000))
        for criterion in CRITERIA
    ]
    assert sum(again) == sum(draws)
    other_seed = [
        disagrees(8, f"reply {i}", criterion["text"], 0.1)
        for i in range(1000)
        for criterion in CRITERIA
    ]
    assert other_seed != draws


def test_a_judge_counts_what_it_read_the_other_way() -> None:
    judge = NoisyJudge(seed=3, rate=0.5)
    replies = [f"2 + 2 = 4. The answer is 4. (variant {i})" for i in range(40)]
    first = [_scores(judge, r) for r in replies]
    assert judge.verdicts == 120
    assert 0 < judge.flipped < 120
    # the same reply gets the same verdicts, asked again in another order
    assert [_scores(judge, r) for r in reversed(replies)] == list(reversed(first))


def test_a_request_that_is_not_a_scorers_is_answered_honestly() -> None:
    judge = NoisyJudge(seed=0, rate=1.0)
    assert judge.noisy({"messages": [{"role": "user", "content": "hello"}]}) is None
    with pytest.raises(ValueError, match="rate"):
        NoisyJudge(seed=0, rate=1.5)


def test_the_scenarios_auditor_is_served_by_the_simulator_not_the_scorers_judge() -> None:
    overrides = scenario_overrides("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    assert overrides["client.scorer.base_url"] == "http://127.0.0.1:1/v1"
    assert overrides["client.auditor.base_url"] == "http://127.0.0.1:2/v1"
    assert "client.auditor.offline" not in overrides
