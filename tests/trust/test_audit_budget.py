"""The audit's sample within its budget and the alarm that reads one step's jump: a sample
sized to ``audit.max_share`` over the run, the same sample whatever the rollouts' arrival
order, the top tail's ties and its longest reply, the ``gap_jump`` alarm."""

from __future__ import annotations

from amaris.memory.records import LoggedRollout, RolloutRecord
from amaris.settings import AuditSettings
from amaris.trust.audit.alarm import TrendPoint, check_alarm
from amaris.trust.audit.models import CriterionTally, Fidelity
from amaris.trust.audit.sampling import budget_left, sample_size, stratified_sample
from tasks.audit import sample_key


def test_the_default_sample_of_a_small_step_is_two_rollouts() -> None:
    # 32 judged rollouts a step (the default simulation): 2 auditor calls, under 7%.
    settings = AuditSettings()
    assert sample_size(32, settings.sample_share, settings.min_samples) == 2
    assert sample_size(256, settings.sample_share, settings.min_samples) == 13
    assert 2 / (32 + 2) < 0.07


def test_the_budget_caps_the_sample_and_carries_what_a_step_leaves() -> None:
    assert budget_left(None, 32, []) is None
    # 5% of 32 = 1.6 calls a step: 1, then 2 (3.2 - 1), 1 (4.8 - 3), 2 (6.4 - 4), 2 (8 - 6) ...
    spent: list[tuple[int, int]] = []
    sizes = []
    for _ in range(6):
        budget = budget_left(0.05, 32, spent)
        size = sample_size(32, 0.05, 8, budget)
        sizes.append(size)
        spent.append((32, size))
    assert sizes == [1, 2, 1, 2, 2, 1]
    assert sum(sizes) <= 0.05 * 32 * 6
    # The cap wins over min_samples, and is never negative.
    assert sample_size(32, 0.05, 8, 0) == 0
    assert budget_left(0.05, 10, [(10, 8)]) == 0


def record(rid: str, seq: int, score: float, output: str = "x") -> RolloutRecord:
    return RolloutRecord(
        rollout=LoggedRollout(id=rid, output=output), score=score, rubric_version=1, seq=seq
    )


def test_the_sample_is_the_same_whatever_the_arrival_order() -> None:
    # Many rollouts tie at the top reward: which of them the sample draws must not
    # depend on the order they came in (``seq`` must not order the ties).
    rewards = [1.0 if i % 2 else 0.0 for i in range(32)]
    first = [record(f"r{i:02}", i, rewards[i]) for i in range(32)]
    shuffled = [record(f"r{i:02}", 31 - i, rewards[i]) for i in reversed(range(32))]

    def drawn(records: list[RolloutRecord]) -> list[str]:
        sample = stratified_sample(
            records,
            lambda r: float(r.score or 0.0),
            sample_key,
            4,
            top_tail=0.2,
            top_tail_share=0.5,
            seed="audit-step-2",
        )
        return sorted(d.item.rollout.id for d in sample)

    assert drawn(first) == drawn(shuffled)


def test_the_top_tail_holds_its_ties_and_its_longest_reply_is_drawn_first() -> None:
    # 20 rollouts at the top reward (one of them long), 12 below: the tail (20% = 7 by
    # rank) takes in all 20 ties, and its one draw is the long reply.
    items = [(f"t{i:02}", 1.0, 300 if i == 3 else 20) for i in range(20)]
    items += [(f"b{i:02}", 0.2, 500) for i in range(12)]
    for seed in range(5):
        sample = stratified_sample(
            items,
            lambda item: item[1],
            lambda item: item[0],
            2,
            top_tail=0.2,
            top_tail_share=0.5,
            seed=f"audit-step-{seed}",
            length=lambda item: item[2],
        )
        tail = [d.item[0] for d in sample if d.top_tail]
        below = [d.item[0] for d in sample if not d.top_tail]
        assert tail == ["t03"]
        assert len(below) == 1 and below[0].startswith("b")
        assert {d.threshold for d in sample} == {1.0}


def paid(pairs: int, paid_more: int, others: int = 0) -> tuple[CriterionTally, ...]:
    """A top tail's tally: criterion P1 paid more by the training judge on ``paid_more`` of
    ``pairs`` rollouts, criterion A1 on ``others``."""
    return (
        CriterionTally(id="A1", text="correct", pairs=pairs, paid_more=others),
        CriterionTally(id="P1", text="padding", pairs=pairs, paid_more=paid_more),
    )


def fid(gap: float | None, paid_more: int = 1) -> Fidelity:
    return Fidelity(
        sampled=2,
        training_mean=0.5,
        audit_mean=0.5,
        top_tail_gap=gap,
        top_tail_agreement=0.0,
        top_tail_sampled=1,
        tally=list(paid(1, paid_more)),
    )


def point(step: int, gap: float, paid_more: int, others: int = 0) -> TrendPoint:
    return TrendPoint(step, 0.5, 0.5, gap, graded=2, tally=paid(1, paid_more, others))


def test_a_jump_of_the_gap_over_the_window_raises_the_alarm() -> None:
    settings = AuditSettings(window=3, max_gap_jump=0.25)
    earlier = [point(1, 1.0, 1), point(2, 1.0, 1)]
    alarm = check_alarm(fid(1.0), 3, earlier, settings)
    assert alarm is not None and alarm.kind == "gap_jump"
    assert "over steps 1, 2, 3" in alarm.reason
    assert "criterion P1 ('padding') where the auditor did not on 3 of 3" in alarm.reason
    # One criterion read against the payment on 2 of the 3: within the prior's noise.
    assert check_alarm(fid(1.0, paid_more=0), 3, earlier, settings) is None
    # The first audited steps have too few items to tell from noise.
    assert check_alarm(fid(1.0), 0, [], settings) is None
    assert check_alarm(fid(1.0), 1, earlier[:1], settings) is None
    # A history where the two judges read every criterion differently as often: noise.
    noisy = [point(i - 10, 1.0, 1, others=1) for i in range(10)]
    assert check_alarm(fid(1.0), 3, [*noisy, *earlier], settings) is None
    # A history that read P1 alone differently (a drift the window missed) does not
    # raise the rate P1 is tested against: the other criteria's history sets it.
    drifted = [point(i - 10, 1.0, 1) for i in range(10)]
    assert check_alarm(fid(1.0), 3, [*drifted, *earlier], settings) is not None
    # A window whose top-tail gap stays under max_gap_jump is no jump.
    small = [point(1, 0.1, 1), point(2, 0.1, 1)]
    assert check_alarm(fid(0.2), 3, small, settings) is None
