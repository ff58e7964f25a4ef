"""One call budget for the checks on the judge: the audit judge's sample, its swap checks
and the judge canaries together spend ``audit.budget_share`` of the judged rollouts, as
each step comes (docs/judge-trust.md).

Sized alone, each check has a floor that is a large share of a small step: two audited
rollouts, a canary probe every few steps, a swap check over the canaries' budget. The
budget takes the floors away. Each step adds ``budget_share`` x its judged rollouts to a
credit; a step whose credit holds a sample of one and ``audit.swap_checks`` swap checks
(:func:`allowance`) spends its whole calls, in the order the Goodhart alarm needs them:

1. the audit's sample (:func:`audit_cap`): all but ``swap_checks`` of the calls, its
   top-tail draw first (a drift shows there first);
2. the swap checks, when the audit found an over-rewarded top-tail rollout;
3. the judge canaries (:func:`canary_budget`): what is left, within their own
   ``judge_canaries.max_share`` less the swap checks.

The fraction of a call is carried to the next step; a smaller credit waits for the next
steps (no check that step). The credit depends on the judged rollouts alone, never on what
the audits found: the alarm's tests count their items as drawn, and a sample sized by
earlier disagreements would bias them. Only the confirmation of the run's first blind
swap check goes past a step's calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from amaris.settings import AuditSettings, JudgeCanarySettings
from amaris.trust.audit.sampling import budget_left
from amaris.trust.judge_canaries import budget_of

EPSILON = 1e-9
"""Slack under a credit that is a whole number of calls, so it is not rounded down to one
less."""


def _spend(credit: float, swap_checks: int, population: int) -> int:
    """The whole calls a step spends of ``credit``: all of them when they hold a sample of
    one and ``swap_checks`` swap checks and the step has a judged rollout, else none."""
    whole = math.floor(credit + EPSILON)
    return whole if population > 0 and whole >= 1 + swap_checks else 0


def allowance(share: float, swap_checks: int, population: int, earlier: Sequence[int]) -> int:
    """Calls the checks of a step of ``population`` judged rollouts may make together,
    after audited steps of ``earlier`` judged rollouts each (oldest first): the credit's
    whole calls once they hold a sample of one and ``swap_checks`` swap checks, else 0
    (the credit waits for the next step)."""
    credit = 0.0
    for judged in earlier:
        credit += share * judged
        credit -= _spend(credit, swap_checks, judged)
    return _spend(credit + share * population, swap_checks, population)


def audit_cap(allowed: int, swap_checks: int) -> int:
    """Most rollouts the audit's sample may take of a step's ``allowed`` calls: all but
    ``swap_checks``, kept for the swap checks (none without calls)."""
    return max(0, allowed - swap_checks) if allowed > 0 else 0


def canary_budget(allowed: int, spent: int, own: int) -> int:
    """Probes the judge canaries may make of a step's ``allowed`` calls once its audit and
    swap checks spent ``spent``: ``own`` (their own share, less the swap checks) at most."""
    return max(0, min(own, allowed - spent))


def sample_cap(
    settings: AuditSettings,
    population: int,
    regraded: Sequence[tuple[int, int]],
) -> tuple[int | None, int | None]:
    """The calls a step of ``population`` judged rollouts may make of ``audit.budget_share``
    (None: no shared budget) and the most rollouts its audit's sample may take (None: no
    cap): :func:`audit_cap` of them, within ``audit.max_share``. ``regraded``: each earlier
    audited step's (judged rollouts, rollouts re-graded), oldest first."""
    cap = budget_left(settings.max_share, population, regraded)
    if settings.budget_share is None:
        return None, cap
    earlier = [judged for judged, _ in regraded]
    allowed = allowance(settings.budget_share, settings.swap_checks, population, earlier)
    part = audit_cap(allowed, settings.swap_checks)
    return allowed, part if cap is None else min(cap, part)


def canaries_left(
    canaries: JudgeCanarySettings,
    step: int,
    population: int,
    allowed: int | None,
    spent: int,
    swaps: int,
) -> int:
    """Probes the judge canaries may make on an audited step of ``population`` judged
    rollouts whose audit and swap checks (``swaps`` of them) spent ``spent`` of its
    ``allowed`` calls (None: no shared budget): their own ``judge_canaries.max_share``
    less the swap checks, within what is left (:func:`canary_budget`); none while off."""
    if not canaries.enabled:
        return 0
    own = max(0, budget_of(population, canaries.max_share, step) - swaps)
    return own if allowed is None else canary_budget(allowed, spent, own)
