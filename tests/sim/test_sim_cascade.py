"""``amaris simulate --scenario cascade``: the simulator's cheap judge (wrong on a seeded share
of its verdicts, its logprob margin a signal of being right), the strong-only reward it is
measured against, and the scenario end to end at a small size (a real ``amaris serve`` on
the session's Prefect test server); ``cascade.json`` read back."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from amaris.agents.prompts import agent_messages
from amaris.cli.main import main
from amaris.llm.providers import parse_logprobs
from amaris.memory.records import RolloutRecord
from amaris.offline.heuristics import judge_criterion
from amaris.rubric.aggregate import aggregate
from amaris.scoring.verdicts import margin, score_distributions
from amaris.sim.cascade import ERROR_RATE, CheapJudge, strong_only_reward

CRITERIA = [
    {"id": "A1", "text": "The response gives the correct final answer.", "kind": "requirement"},
    {"id": "R1", "text": "The response offers several candidate answers.", "kind": "pitfall"},
]
REPLY = "47 * 23 = 1081. The answer is 1081."


def _ask(judge: CheapJudge, output: str, logprobs: bool = True) -> tuple[str, Any]:
    rollout = {"input": "What is 47 * 23?", "supplemental_context": "1081", "output": output}
    messages = agent_messages("scorer", "judge", {"criteria": CRITERIA}, {"rollout": rollout})
    reply = asyncio.run(judge({"messages": messages, "logprobs": logprobs}))
    return reply.content or "", reply.logprobs


def test_its_verdicts_come_with_logprobs_amaris_reads() -> None:
    judge = CheapJudge(seed=3)
    content, logprobs = _ask(judge, REPLY)
    scores = [v["score"] for v in json.loads(content)["verdicts"]]
    tokens = parse_logprobs({"content": logprobs})
    assert tokens is not None
    found = score_distributions(tokens, content, scores)
    assert found is not None
    for criterion, score, distribution in zip(CRITERIA, scores, found, strict=True):
        honest = judge_criterion(criterion["id"], criterion["text"], REPLY, "1081").score
        given, _, p = judge.reading(REPLY, criterion["text"], honest)
        assert given == score and max(distribution.values()) == pytest.approx(p)
    # Without logprobs asked for: the same verdicts, no logprobs.
    again, none = _ask(judge, REPLY, logprobs=False)
    assert (again, none) == (content, None)


def test_its_margin_says_when_it_is_right() -> None:
    judge = CheapJudge(seed=0)
    sure = {True: 0, False: 0}
    unsure = {True: 0, False: 0}
    for i in range(2000):
        given, other, p = judge.reading(f"reply {i}", "a criterion", 4)
        right = given == 4
        (sure if margin({given: p, other: 1 - p}) >= 0.99 else unsure)[right] += 1
    wrong = (sure[False] + unsure[False]) / 2000
    assert wrong == pytest.approx(ERROR_RATE, abs=0.02)
    # Few of its sure verdicts are wrong; about half of the others.
    assert sure[False] / (sure[True] + sure[False]) < 0.03
    assert unsure[False] / (unsure[True] + unsure[False]) > 0.3
    # The same draws in any order.
    assert judge.reading("reply 7", "a criterion", 4) == judge.reading("reply 7", "a criterion", 4)


def test_strong_only_reward_is_the_offline_judge_on_the_logged_rollout() -> None:
    wrong = "47 * 23 = 1080 or 1081 or 1082. The answer is 1080 or 1081 or 1082."
    verdicts = [
        {"id": c["id"], "text": c["text"], "weight": w, "verdict": 2, "kind": "judge"}
        for c, w in zip(CRITERIA, (1.0, -1.0), strict=True)
    ]
    verdicts.append({"id": "A2", "text": "rule", "weight": 0.5, "verdict": 4, "kind": "rule"})
    record = RolloutRecord.model_validate(
        {
            "rollout": {
                "id": "r1",
                "input": "What is 47 * 23?",
                "output": wrong,
                "supplemental_context": "1081",
            },
            "status": "scored",
            "score": 0.5,
            "verdicts": verdicts,
        }
    )
    honest = [judge_criterion(c["id"], c["text"], wrong, "1081").score for c in CRITERIA]
    assert strong_only_reward(record) == aggregate([1.0, -1.0, 0.5], [*honest, 4])
    unjudged = record.model_copy(update={"verdicts": record.verdicts[2:]})
    assert strong_only_reward(unjudged) is None


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_the_scenario_writes_cascade_json(tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    config = tmp_path / "config.yaml"
    # Calibrated early enough for a run this small to show both judges deciding.
    config.write_text("scoring:\n  cascade:\n    min_pairs: 16\n    target_agreement: 0.9\n")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
        env.chdir(tmp_path)  # the run's manifest goes to ./data
        args = ["--steps", "3", "--rollouts-per-step", "32", "--out", str(tmp_path / "out")]
        code = main(["simulate", "--scenario", "cascade", "--config", str(config), *args])
    assert code == 0
    figures: dict[str, Any] = json.loads((tmp_path / "out" / "cascade.json").read_text())
    judged = figures["judged"]
    assert judged == 96
    # Every judged rollout was decided by the cheap judge or cost one strong call (none
    # when the judge's cache held it).
    assert figures["strong_calls"] + figures["decided_by_cheap"] <= judged
    assert 0 < figures["decided_by_cheap"] < judged
    assert figures["strong_call_share"] == round(figures["strong_calls"] / judged, 4)
    assert 0 < figures["cheap_calls"] <= judged
    steps = figures["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert sum(s["strong_calls"] for s in steps) == figures["strong_calls"]
    # Under min_pairs (16) every rollout is escalated: the first ones are the strong judge's.
    assert steps[0]["strong_calls"] >= 16
    # The rollouts the strong judge decided match strong-only's reward exactly: the two
    # agree everywhere the cheap judge did not decide.
    cheap_matches = round(figures["cheap_agreement"] * figures["decided_by_cheap"])
    matches = round(figures["agreement_with_strong"] * judged)
    assert matches - cheap_matches == judged - figures["decided_by_cheap"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "Scenario cascade" in report and "cascade.json" in report
