"""Judge canaries: probe mining, the plan, the alarm rule and the
learned pre-check rules (matching, and the store in real Qdrant local mode)."""

from __future__ import annotations

from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from amaris.trust import mining
from amaris.trust.judge_canaries import (
    KINDS,
    MAX_TRIES,
    AuditPair,
    CanarySource,
    Probe,
    budget_of,
    mine,
    plan_probes,
    verdict,
)
from amaris.trust.learned_rules import LearnedRules, generic, new_rule
from amaris.trust.precheck import degenerate
from amaris.trust.rule_store import LearnedRule, PrecheckRuleStore, UnknownRuleError

REPLY = (
    "Let me think about this carefully. First, 3 times 7 means adding 7 three times: "
    "7 + 7 + 7. That makes 14 + 7. So the answer is 21."
)
PROMPT = "What is 3 * 7?"


def source(output: str = REPLY, *, id: str = "r1", reward: float = 1.0, **kw: str) -> CanarySource:
    fields = {"input": PROMPT, "supplemental_context": "Answer: 21", **kw}
    return CanarySource(
        id=id, scope="global", output=output, rubric_version=1, reward=reward, **fields
    )


# -- mining, one kind at a time ---------------------------------------------------------


def test_the_opening_sentence_alone() -> None:
    assert mining.opening_sentence(REPLY) == "Let me think about this carefully."
    assert mining.opening_sentence("Line one\nline two") == "Line one"
    # a reply of one sentence has no opener apart from itself
    assert mining.opening_sentence("The answer is 21.") is None
    assert mine("opener", source()) == ("Let me think about this carefully.", None)


def test_an_opener_that_states_the_answer_is_no_probe() -> None:
    # "21 is the answer." alone deserves its reward: its right answer is not the floor
    assert mine("opener", source("21 is the answer. Because 3 * 7 = 21.")) is None
    # the reference's answer counts too, whatever the reply ends with
    assert mine("opener", source("It is 21. Hmm, or 22? I say 22.")) is None


def test_the_reasoning_without_its_final_answer() -> None:
    text, baseline = mine("no_answer", source()) or ("", 0.0)
    assert text == (
        "Let me think about this carefully. First, 3 times 7 means adding 7 three times: "
        "7 + 7 + 7. That makes 14 + 7."
    )
    assert baseline is None
    # a reply whose reasoning ends on the answer leaves no answer-free part
    assert mine("no_answer", source("3 * 7 = 21. The answer is 21.")) is None


def test_the_reply_cut_at_half_length() -> None:
    text, _ = mine("half", source()) or ("", 0.0)
    assert text == "Let me think about this carefully. First, 3 times 7 means adding"
    assert len(text) <= len(REPLY) // 2
    assert mine("half", source("21. " + "Because multiplication repeats an addition. " * 3)) is None


def test_the_same_reply_with_a_wrong_answer() -> None:
    text, baseline = mine("swapped", source(reward=0.9)) or ("", 0.0)
    assert text == REPLY.replace("answer is 21", "answer is 22")
    assert baseline == 0.9
    assert mining.swapped("The answer is 2.5.", "2.5") == "The answer is 3.5."
    # words are not swapped: no wrong answer can be known for them
    assert mine("swapped", source("The capital is Paris.", supplemental_context="Paris")) is None


def test_probes_are_not_mined_from_oversized_replies() -> None:
    long = REPLY + " " + "x" * mining.MAX_SOURCE_CHARS
    assert plan_probes([source(long)], [], step=0, budget=4, min_swap_reward=0.3) == []


# -- the plan ------------------------------------------------------------------------


def test_the_budget_is_a_share_of_the_judged_rollouts_rounded_down() -> None:
    assert budget_of(50, 0.02, 7) == 1
    assert budget_of(99, 0.02, 7) == 1
    assert budget_of(256, 0.02, 7) == 5
    assert budget_of(0, 0.02, 0) == 0


def test_a_step_too_small_for_one_probe_gets_one_every_few_steps_within_the_share() -> None:
    # 32 judged rollouts at 2%: 0.64 of a probe a step, so one every second step
    assert [budget_of(32, 0.02, step) for step in range(6)] == [1, 0, 1, 0, 1, 0]
    # 24: 0.48 of a probe, one every third step
    assert [budget_of(24, 0.02, step) for step in range(6)] == [1, 0, 0, 1, 0, 0]
    for judged in (1, 7, 24, 25, 32, 49):
        probes = sum(budget_of(judged, 0.02, step) for step in range(300))
        assert 0 < probes <= 0.02 * judged * 300


def test_kinds_take_turns_from_the_step_and_skip_what_cannot_be_mined() -> None:
    sources = [source(id=f"r{i}", reward=1.0 - i / 10) for i in range(4)]
    pair = AuditPair(
        rollout_id="r9",
        input=PROMPT,
        output="22",
        rubric_version=1,
        training_reward=0.9,
        audit_reward=0.1,
    )
    plan = plan_probes(sources, [pair], step=0, budget=6, min_swap_reward=0.3)
    assert [p.kind for p in plan] == list(KINDS)
    # one probe at step 2 is a half-length probe; at step 4 a master key
    [half] = plan_probes(sources, [], step=2, budget=1, min_swap_reward=0.3)
    assert half.kind == "half" and half.rollout_id == "r0"
    [key] = plan_probes(sources, [], step=4, budget=1, min_swap_reward=0.3)
    assert key.kind == "master_key" and key.output == "Solution"
    # no audit pair: its turn goes to the next kind
    [after] = plan_probes(sources, [], step=5, budget=1, min_swap_reward=0.3)
    assert after.kind == "opener"


def test_a_swap_needs_a_reply_the_judge_rewarded() -> None:
    low = [source(reward=0.2)]
    plan = plan_probes(low, [], step=3, budget=1, min_swap_reward=0.3)
    assert {p.kind for p in plan} == {"master_key"}


def test_the_best_rewarded_correct_reply_is_taken_apart_first() -> None:
    wrong = source("Let me see. Seven threes. So the answer is 24.", id="wrong", reward=1.0)
    right = source(id="right", reward=0.8)
    [probe] = plan_probes([wrong, right], [], step=0, budget=1, min_swap_reward=0.3)
    assert probe.rollout_id == "right"


# -- the alarm rule --------------------------------------------------------------------


def probe(kind: str, baseline: float | None = None) -> Probe:
    return Probe.model_validate(
        {
            "id": "p",
            "kind": kind,
            "scope": "global",
            "rubric_version": 1,
            "rollout_id": "r1",
            "input": PROMPT,
            "output": "x",
            "baseline": baseline,
        }
    )


@pytest.mark.parametrize(
    ("kind", "baseline", "reward", "alarm"),
    [
        ("opener", None, 0.1, False),
        ("opener", None, 0.11, True),
        ("master_key", None, 1.0, True),
        ("half", None, 0.0, False),
        ("swapped", 0.9, 0.85, True),  # within the tolerance of the original
        ("swapped", 0.9, 0.95, True),  # above it
        ("swapped", 0.9, 0.5, False),
        ("audit", 0.2, 0.35, True),
        ("audit", 0.2, 0.3, False),
    ],
)
def test_the_alarm_rule(kind: str, baseline: float | None, reward: float, alarm: bool) -> None:
    raised, reason = verdict(
        probe(kind, baseline), reward, floor=0.0, floor_margin=0.1, swap_tolerance=0.1
    )
    assert raised is alarm, reason


def test_the_floor_is_the_pre_checks() -> None:
    raised, _ = verdict(probe("opener"), 0.35, floor=0.3, floor_margin=0.1, swap_tolerance=0.1)
    assert not raised


# -- learned rules -----------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> PrecheckRuleStore:
    return PrecheckRuleStore(QdrantClient(path=str(tmp_path / "qdrant")), "t")


def opener_rule(
    text: str = "Let me think about this carefully.", prompt: str = PROMPT
) -> LearnedRule:
    return new_rule(
        kind="opener", text=text, prompt=prompt, step=3, scope="global", rollout_id="r1", reward=1.0
    )


def test_a_rule_from_an_opener_floors_that_opener_alone_not_an_answer_opening_with_it(
    store: PrecheckRuleStore,
) -> None:
    rules = LearnedRules(store)
    assert not rules.in_force()  # the pre-check is then asked without the rules
    rule = store.add(opener_rule())
    assert rule is not None and rule.any_prompt
    assert rules.in_force()
    found = degenerate(
        "  let me THINK about this, carefully! ", "What is 5 + 5?", None, rules.match
    )
    assert found is not None and found.kind == "learned"
    assert found.reason().startswith(f"degenerate_reply: learned (rule {rule.id} ")
    assert degenerate(REPLY, PROMPT, "Answer: 21", rules.match) is None
    assert degenerate("Let me think about this carefully. 21", PROMPT, None, rules.match) is None


def test_a_rule_never_floors_the_reference_answer(store: PrecheckRuleStore) -> None:
    store.add(
        new_rule(
            kind="half",
            text="Paris",
            prompt="Capital?",
            step=1,
            scope="g",
            rollout_id="r",
            reward=1,
        )
    )
    match = LearnedRules(store).match
    assert degenerate("Paris", "Capital?", None, match) is not None
    assert degenerate("Paris", "Capital?", "Paris", match) is None


def test_an_opener_about_its_prompt_and_other_kinds_hold_for_their_prompt_only(
    store: PrecheckRuleStore,
) -> None:
    assert not generic("The capital of France is a large city.", "What is the capital of France?")
    assert not generic("First compute 3 times 7.", "Multiply")  # a digit
    assert generic("I am confident this is right.", "What is the capital of France?")
    rule = new_rule(
        kind="no_answer",
        text="First, 3 times 7 means adding 7 three times.",
        prompt=PROMPT,
        step=1,
        scope="global",
        rollout_id="r1",
        reward=0.9,
    )
    store.add(rule)
    match = LearnedRules(store).match
    assert not rule.any_prompt
    assert degenerate(rule.preview, PROMPT, None, match) is not None
    assert degenerate(rule.preview, "What is 3 * 8?", None, match) is None


def test_the_store_versions_persists_removes_and_survives_a_restart(tmp_path: Path) -> None:
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    store = PrecheckRuleStore(client, "t")
    assert store.version == 0 and store.rule_set().rules == []
    first = store.add(opener_rule())
    second = store.add(opener_rule("Great question, truly."))
    assert first is not None and second is not None
    assert (first.added_in, second.added_in, store.version) == (1, 2, 2)
    assert store.add(opener_rule()) is None  # the same rule again: nothing new
    removed = store.remove(first.id)
    assert removed.removed_in == 3 and store.version == 3
    with pytest.raises(UnknownRuleError):
        store.remove(first.id)
    with pytest.raises(UnknownRuleError):
        store.remove("nope")
    # a person removed it: an alarm does not bring it back
    assert store.add(opener_rule()) is None
    client.close()

    reopened = PrecheckRuleStore(QdrantClient(path=str(tmp_path / "qdrant")), "t")
    assert reopened.version == 3
    assert [r.id for r in reopened.rule_set().rules] == [second.id]
    assert [r.id for r in reopened.rule_set(removed=True).rules] == [first.id, second.id]
    assert list(reopened.index()) == [second.key]


def test_another_process_s_rules_are_seen_on_refresh() -> None:
    client = QdrantClient(location=":memory:")
    reader, writer = PrecheckRuleStore(client, "t"), PrecheckRuleStore(client, "t")
    assert not reader.refresh()
    added = writer.add(opener_rule())
    assert added is not None and reader.index() == {}
    assert reader.refresh()
    assert list(reader.index()) == [added.key] and reader.version == 1


def test_planning_tries_a_bounded_number_of_replies_per_kind() -> None:
    # none of these replies gives a mined probe (each states its answer in its opener, its
    # first half, everywhere): only the first MAX_TRIES of them are read per kind
    useless = [source(f"21. {'21 ' * 50}", id=f"u{i}", reward=0.2) for i in range(40)]
    good = source(id="good", reward=0.1)  # ranked last: the lowest reward
    plan = plan_probes([*useless, good], [], step=0, budget=4, min_swap_reward=0.3)
    assert {p.kind for p in plan} == {"master_key"}
    assert (
        plan_probes([*useless[: MAX_TRIES - 1], good], [], step=0, budget=1, min_swap_reward=0.3)[
            0
        ].rollout_id
        == "good"
    )


def test_a_removal_elsewhere_is_respected_and_a_rule_learned_elsewhere_removable() -> None:
    client = QdrantClient(location=":memory:")
    api, worker = PrecheckRuleStore(client, "t"), PrecheckRuleStore(client, "t")
    learned = worker.add(opener_rule())
    assert learned is not None
    assert api.remove(learned.id).removed_in == 2  # learned by the worker, removed by the API
    assert worker.add(opener_rule()) is None  # the worker does not bring it back
    assert worker.rule_set().rules == [] and worker.version == 2
