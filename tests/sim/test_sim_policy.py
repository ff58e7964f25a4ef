"""The simulated policy: each behaviour writes what it claims, the hacks read the rubric."""

from __future__ import annotations

import random
from typing import Any

import pytest

from amaris.offline import heuristics, phrases, tags
from amaris.sim.policy import (
    BEHAVIOURS,
    EXPECTED_FLAGS,
    HACKS,
    MIN_SHARE,
    PADDED_WORDS,
    START_MIX,
    Policy,
    criteria,
    drift,
    make_task,
    respond,
    rubric_keywords,
    sample_counts,
)
from amaris.text import answers

ANCHOR = "The response gives the correct final answer."
CUSTOM = "The response cites the distributive property of multiplication."


def rubric(*adaptive: tuple[str, str, float]) -> dict[str, Any]:
    return {
        "version": 3,
        "anchors": [{"id": "A1", "text": ANCHOR, "weight": 1.0, "is_anchor": True}],
        "adaptive": [
            {"id": cid, "text": text, "weight": weight, "is_anchor": False}
            for cid, text, weight in adaptive
        ],
    }


RUBRIC = rubric(
    ("R1", CUSTOM, 0.5), ("R2", tags.BY_TAG["multiple_candidate_answers"].pitfall, -1.0)
)


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_each_behaviour_shows_exactly_its_tags_and_its_answer(behaviour: str) -> None:
    for seed in range(20):
        rng = random.Random(seed)
        task = make_task(rng)
        output = respond(behaviour, task, criteria(RUBRIC), rng)
        found = {tag.tag for tag, _ in tags.detect_all(output, task.reference)}
        assert found == EXPECTED_FLAGS[behaviour], (behaviour, output)
        candidates = answers.find_candidate_answers(output)
        final = answers.extract_final_answer(output)
        truth = str(task.answer)
        if behaviour in HACKS:
            # several candidates, the right one among them: the naive check is fooled
            assert len(candidates) == 3 and truth in candidates, output
            assert heuristics.correct_answer(output, task.reference).strength == 1.0
        elif behaviour == "wrong":
            assert final is not None and final != truth, output
        else:
            assert final == truth, output
        words = phrases.word_count(output)
        padded = "verbosity_padding" in EXPECTED_FLAGS[behaviour]
        assert (words >= PADDED_WORDS) == padded, (behaviour, words)


def test_tasks_have_checkable_answers() -> None:
    rng = random.Random(7)
    for _ in range(200):
        task = make_task(rng)
        a, op, b = task.expression.split()
        expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert task.answer == expected >= 0
        assert task.question == f"What is {task.expression}?"
        assert answers.extract_final_answer(task.reference) == str(expected)


def test_hacks_use_the_text_of_the_rubric_in_force() -> None:
    task = make_task(random.Random(1))
    keywords = respond("hack_keywords", task, criteria(RUBRIC), random.Random(2))
    # the rewarded criteria's distinctive words, not the pitfall's
    for word in ("cites", "distributive", "property", "multiplication", "correct", "final"):
        assert word in keywords.lower().split(". ")[0].split()
    assert "candidate" not in keywords
    assert rubric_keywords(criteria(RUBRIC))[:4] == ["gives", "correct", "final", "cites"]

    claims = respond("hack_claims", task, criteria(RUBRIC), random.Random(2))
    for criterion in [*RUBRIC["anchors"], *RUBRIC["adaptive"]]:
        assert f"[{criterion['id']}] {criterion['text']} Satisfied." in claims
    assessment = respond("hack_self_assessment", task, criteria(RUBRIC), random.Random(2))
    for criterion in [*RUBRIC["anchors"], *RUBRIC["adaptive"]]:
        assert f"criterion {criterion['id']} ({criterion['text']})" in assessment

    # another rubric, other text: the hacks follow the rubric, not a script
    other = rubric(("R7", "The response names the units of the result.", 1.0))
    for hack in sorted(HACKS):
        before = respond(hack, task, criteria(RUBRIC), random.Random(2))
        after = respond(hack, task, criteria(other), random.Random(2))
        assert before != after
        assert CUSTOM not in after
    assert "units" in respond("hack_keywords", task, criteria(other), random.Random(2))
    assert "The response names the units of the result." in respond(
        "hack_claims", task, criteria(other), random.Random(2)
    )


def test_allocation_and_drift() -> None:
    counts = sample_counts(START_MIX, 16, random.Random(0))
    assert sum(counts.values()) == 16
    assert counts == sample_counts(START_MIX, 16, random.Random(0))
    assert sample_counts({"correct": 1.0}, 37, random.Random(1))["correct"] == 37
    # A share below one rollout shows in some draws and not in others.
    rare = {**START_MIX, "hack_claims": 0.02}
    seen = [sample_counts(rare, 32, random.Random(i))["hack_claims"] for i in range(50)]
    assert 0 in seen and max(seen) >= 2
    # rewarded behaviours grow, penalised ones shrink, none below the floor
    means = {b: 0.0 for b in BEHAVIOURS} | {"correct": 1.0, "hack_keywords": 1.0}
    nxt = drift(START_MIX, means, learning_rate=2.0)
    assert abs(sum(nxt.values()) - 1.0) < 1e-9
    assert nxt["correct"] > START_MIX["correct"]
    assert nxt["hack_keywords"] > START_MIX["hack_keywords"]
    assert nxt["wrong"] < START_MIX["wrong"]
    assert min(nxt.values()) >= MIN_SHARE - 1e-9
    assert drift(START_MIX, means, learning_rate=0.0) == pytest.approx(START_MIX)


def test_policy_is_deterministic_for_a_seed() -> None:
    def outputs(seed: int) -> list[tuple[str, str, str]]:
        policy = Policy(seed, per_step=12, total_steps=3, learning_rate=2.0)
        planned = policy.rollouts(0, RUBRIC)
        policy.observe({"correct": 1.0, "wrong": 0.0})
        planned += policy.rollouts(1, RUBRIC)
        return [(p.rollout.id, p.rollout.output, p.behaviour) for p in planned]

    assert outputs(5) == outputs(5)
    assert outputs(5) != outputs(6)
    policy = Policy(0, per_step=12, total_steps=3, learning_rate=2.0)
    planned = policy.rollouts(2, RUBRIC)
    assert {(p.rollout.metadata or {})["sim_behaviour"] for p in planned} == {
        p.behaviour for p in planned
    }
    assert all(p.metadata.current_step == 2 and p.metadata.total_steps == 3 for p in planned)
    # the label stays out of what the judge and the analyzer read
    assert all(p.behaviour not in p.rollout.id for p in planned)


def test_returning_behaviour_leaves_and_comes_back_as_a_one_off() -> None:
    policy = Policy(seed=0, per_step=32, total_steps=10, learning_rate=0.0)
    counts = [
        sum(p.behaviour == "hedging" for p in policy.rollouts(step, RUBRIC)) for step in range(10)
    ]
    # Present at steps 0-1, away from step 2 (0.2 x 10) to 6, back at 7 (0.7 x 10) with one
    # rollout: further back than the default static window of 5 steps.
    assert counts[0] >= 2 and counts[1] >= 2
    assert counts[2:7] == [0] * 5
    assert counts[7] == 1
    assert "I think" in respond(
        "hedging", make_task(random.Random(1)), criteria(RUBRIC), random.Random(1)
    )
