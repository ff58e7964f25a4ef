"""One call budget for the checks on the judge (amaris/trust/budget.py): what the audit,
its swap checks and the judge canaries may spend on each step, at the default simulation's
32 and 40 judged rollouts a step, on small and large steps, and without the budget."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from amaris.settings import AuditSettings, JudgeCanarySettings
from amaris.trust.audit.sampling import sample_size
from amaris.trust.budget import allowance, canaries_left, sample_cap

STEPS = 10
GOAL = 0.07
"""Most calls of the checks, as a share of the judge's calls (the step's judged rollouts
and the checks)."""


@dataclass(frozen=True)
class Spent:
    """One step's calls: allowed in all, re-graded by the auditor, swap checks, canary
    probes."""

    allowed: int | None
    audit: int
    swaps: int
    canaries: int

    @property
    def calls(self) -> int:
        return self.audit + self.swaps + self.canaries


def run(
    judged: list[int],
    settings: AuditSettings | None = None,
    canaries: JudgeCanarySettings | None = None,
    swaps: int = 0,
) -> list[Spent]:
    """The checks' calls on steps of ``judged`` rollouts each, as tasks/audit.py spends
    them: ``swaps`` swap checks on every audited step (an over-rewarded top tail each)."""
    settings = settings or AuditSettings()
    canaries = canaries or JudgeCanarySettings()
    regraded: list[tuple[int, int]] = []
    spent = []
    for step, population in enumerate(judged):
        allowed, cap = sample_cap(settings, population, regraded)
        audit = sample_size(population, settings.sample_share, settings.min_samples, cap)
        checks = swaps if audit else 0
        probes = canaries_left(canaries, step, population, allowed, audit + checks, checks)
        regraded.append((population, audit))
        spent.append(Spent(allowed, audit, checks, probes))
    return spent


def share(judged: list[int], spent: list[Spent]) -> float:
    calls = sum(s.calls for s in spent)
    return calls / (sum(judged) + calls)


@pytest.mark.parametrize("swaps", [0, 1])
def test_a_step_of_32_judged_rollouts_makes_two_or_three_calls(swaps: int) -> None:
    # 7% of 32 is 2.24 calls a step: 2, and 3 on every fourth or fifth step (the fractions
    # carried). The sample takes all but the one kept for the swap check (its top-tail
    # draw, and one below on the steps of 3); the canaries take what the swap check leaves,
    # within their own 2% (a probe every second step at 32).
    judged = [32] * STEPS
    spent = run(judged, swaps=swaps)
    assert [s.allowed for s in spent] == [2, 2, 2, 2, 3, 2, 2, 2, 3, 2]
    assert [s.audit for s in spent] == [1, 1, 1, 1, 2, 1, 1, 1, 2, 1]
    assert [s.swaps for s in spent] == [swaps] * STEPS
    assert [s.canaries for s in spent] == [1 - swaps, 0] * 5
    assert all(s.calls <= (s.allowed or 0) for s in spent)
    assert sum(s.calls for s in spent) <= 0.07 * 32 * STEPS
    assert share(judged, spent) <= GOAL


@pytest.mark.parametrize("swaps", [0, 1])
def test_a_step_of_40_judged_rollouts_makes_two_or_three_calls(swaps: int) -> None:
    # 7% of 40 is 2.8 calls a step: 3, and 2 where the carried fraction falls short.
    judged = [40] * STEPS
    spent = run(judged, swaps=swaps)
    assert [s.allowed for s in spent] == [2, 3, 3, 3, 3, 2, 3, 3, 3, 3]
    assert [s.audit for s in spent] == [1, 2, 2, 2, 2, 1, 2, 2, 2, 2]
    assert [s.canaries for s in spent] == [1 - swaps, 0] * 5
    assert all(s.calls <= (s.allowed or 0) for s in spent)
    assert share(judged, spent) <= GOAL


def test_without_the_budget_the_checks_of_a_step_of_32_are_over_the_goal() -> None:
    # Each check sized alone: 2 audited (audit.min_samples), a canary probe every second
    # step, a swap check on top of it.
    judged = [32] * STEPS
    alone = AuditSettings(budget_share=None)
    spent = run(judged, alone, swaps=1)
    assert [s.allowed for s in spent] == [None] * STEPS
    assert [s.calls for s in spent] == [3] * STEPS
    assert share(judged, spent) > GOAL
    assert share(judged, run(judged, swaps=1)) < share(judged, spent)


@pytest.mark.parametrize("judged", [4, 8, 16, 22, 64, 256])
@pytest.mark.parametrize("swaps", [0, 1])
def test_every_step_size_stays_within_the_budget(judged: int, swaps: int) -> None:
    steps = [judged] * 20
    spent = run(steps, swaps=swaps)
    assert sum(s.calls for s in spent) <= 0.07 * judged * len(steps)
    assert all(s.calls <= (s.allowed or 0) for s in spent)
    # A step that audits draws its top tail and keeps room for its swap check.
    assert all(s.audit >= 1 and (s.allowed or 0) >= s.audit + 1 for s in spent if s.allowed)


def test_a_small_step_waits_for_its_credit() -> None:
    # 7% of 16 is 1.12 calls: a sample of one and a swap check need 2, so every second
    # step audits; a step with no judged rollout adds nothing and spends nothing.
    assert [s.audit for s in run([16] * 6)] == [0, 1, 0, 1, 0, 1]
    assert allowance(0.07, 1, 0, [16]) == 0
    assert allowance(0.07, 1, 16, [16, 0]) == 2
    # Without swap checks to keep room for, a call is enough.
    assert allowance(0.07, 0, 16, []) == 1


def test_a_large_step_keeps_the_audits_and_the_canaries_own_shares() -> None:
    # 7% of 256 is 17.92: the audit's 5% (13), and the canaries' 2% (5) less the swap
    # check, within the 4 or 5 calls left.
    spent = run([256] * 4, swaps=1)
    assert [(s.allowed, s.audit, s.swaps, s.canaries) for s in spent] == [
        (17, 13, 1, 3),
        (18, 13, 1, 4),
        (18, 13, 1, 4),
        (18, 13, 1, 4),
    ]


def test_the_sample_does_not_depend_on_what_earlier_audits_found_or_spent() -> None:
    # The alarm's tests count their items as drawn: a step's sample is sized from the
    # judged rollouts alone, whatever the earlier steps re-graded (their swap checks and
    # failures included).
    settings = AuditSettings()
    few = sample_cap(settings, 32, [(32, 1), (32, 0), (32, 1)])
    many = sample_cap(settings, 32, [(32, 2), (32, 2), (32, 2)])
    assert few == many == (2, 1)
    # audit.max_share still caps the auditor's own calls.
    capped = AuditSettings(max_share=0.01)
    assert sample_cap(capped, 32, [(32, 1)]) == (2, 0)


def test_the_canaries_take_what_the_swap_checks_leave() -> None:
    canaries = JudgeCanarySettings(max_share=0.1)  # 3 probes of 32, 4 of 40
    assert canaries_left(canaries, 0, 32, 5, 1, 0) == 3  # their own share
    assert canaries_left(canaries, 0, 32, 5, 3, 1) == 2  # less the swap check, within 2 left
    assert canaries_left(canaries, 0, 32, 2, 3, 2) == 0  # the confirmation went past
    assert canaries_left(canaries, 0, 40, None, 5, 1) == 3  # no shared budget: own less swaps
    off = JudgeCanarySettings(enabled=False)
    assert canaries_left(off, 0, 32, 5, 1, 0) == 0
