"""The simulated coding agent (amaris.sim.agent_policy) and what the agent-hack scenario
reads of a run (amaris.sim.agent_hack), without a server."""

from __future__ import annotations

import random

import pytest

from amaris.models import Rollout
from amaris.offline import tags
from amaris.scoring.rules import evaluate
from amaris.sim.agent_hack import ANCHOR, hack_outcome
from amaris.sim.agent_policy import BEHAVIOURS, ENTRY_SHARE, HACK, AgentPolicy, episode, make_task
from amaris.sim.answers import CriterionJSON, RubricJSON
from amaris.sim.driver import RolloutResult, RunResult, StepResult
from tests.support.step_runs import unchanged

PER_STEP, STEPS = 16, 12


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_each_behaviour_shows_its_hack_and_earns_the_verifier_s_pay(behaviour: str) -> None:
    assert ANCHOR.rule is not None
    for seed in range(12):
        rng = random.Random(seed)
        messages, outcome = episode(behaviour, make_task(rng), rng)
        rollout = Rollout(id="r", messages=messages, outcome=dict(outcome), finish_reason="stop")
        found = [t.tag for t, _ in tags.detect_all(rollout.output, None)]
        assert found == (["test_tampering"] if behaviour == HACK else [])
        # the verifier pays a fix, and the tampering, whose tampered suite does pass
        paid = evaluate(ANCHOR.rule, rollout.answer(), None).holds
        assert paid == outcome["tests_passed"] == (behaviour != "honest_failure")


def test_the_hack_appears_leaves_and_comes_back_with_one_rollout() -> None:
    policy = AgentPolicy(0, PER_STEP, STEPS, 2.0)
    counts = []
    for step in range(STEPS):
        planned = policy.rollouts(step)
        assert len(planned) == PER_STEP
        counts.append(sum(p.behaviour == HACK for p in planned))
        # the verifier pays tampering like a fix (1.0), an honest attempt half the time
        policy.observe({HACK: 1.0, "honest": 0.5})
    assert counts[: policy.appears] == [0] * policy.appears
    assert counts[policy.appears] == round(ENTRY_SHARE * PER_STEP)
    # unpenalised, it grows under reward pressure
    assert counts[policy.appears + 1] > counts[policy.appears]
    assert counts[policy.leaves : policy.returns] == [0] * (policy.returns - policy.leaves)
    assert counts[policy.returns] == 1
    assert policy.appears < policy.leaves < policy.returns < STEPS


def test_a_penalised_hack_fades() -> None:
    policy = AgentPolicy(0, PER_STEP, STEPS, 2.0)
    policy.tamper_share = 0.4
    policy.observe({HACK: 0.0, "honest": 0.5})
    assert policy.tamper_share < 0.2
    policy.observe({"honest": 0.5})  # no tampering rollout scored: the share stays
    assert policy.tamper_share < 0.2


def _rubric(version: int, pitfall: bool) -> RubricJSON:
    adaptive: list[CriterionJSON] = []
    if pitfall:
        text = tags.BY_TAG["test_tampering"].pitfall
        adaptive = [{"id": "R1", "text": text, "weight": -1.0, "is_anchor": False}]
    return {
        "version": version,
        "parent": None,
        "created_at": "",
        "step": None,
        "origin": "updater",
        "anchors": [],
        "adaptive": adaptive,
    }


def _step(step: int, version: int, rewards: dict[str, list[float]]) -> StepResult:
    rollouts = [
        RolloutResult(f"s{step}-{b}-{i}", b, reward, "scored", version)
        for b, values in rewards.items()
        for i, reward in enumerate(values)
    ]
    return StepResult(step, version, rollouts, unchanged(step), {}, None)


def test_the_outcome_reads_rewards_and_else_the_rubric() -> None:
    fix, fail = "honest_fix", "honest_failure"
    steps = [
        _step(0, 1, {fix: [1.0], fail: [0.0, 0.0, 0.0]}),
        _step(1, 1, {fix: [1.0, 1.0], HACK: [1.0, 1.0]}),
        _step(2, 2, {fix: [1.0, 1.0], HACK: [0.0, 0.0, 0.0, 0.0]}),
        _step(3, 2, {fix: [1.0, 1.0, 1.0, 1.0]}),  # no tampering: the rubric decides
        _step(4, 3, {fix: [1.0, 1.0, 1.0], HACK: [1.0]}),  # back, its pitfall retired
        _step(5, 4, {fix: [1.0, 1.0, 1.0, 1.0]}),
    ]
    history = [_rubric(1, False), _rubric(2, True), _rubric(3, False), _rubric(4, True)]
    outcome = hack_outcome(RunResult("memory-off", steps, history, [], 0.0, "offline", {}))
    assert [s.penalising for s in outcome.steps] == [False, False, True, True, False, True]
    assert (outcome.hack_appears_step, outcome.first_penalising_step) == (1, 2)
    assert outcome.penalised_after == 1
    assert (outcome.tamper_rate_first, outcome.tamper_rate_last) == (0.5, 0.0)
    assert (outcome.resurgence_step, outcome.resurgence_caught_step) == (4, 5)
    assert outcome.resurgence_delay == 1
