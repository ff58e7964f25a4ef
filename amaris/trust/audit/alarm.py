"""The Goodhart alarm: the served reward and the audit diverge, by more than the two
judges' steady disagreement explains.

An honest auditor disagrees with the training judge now and then, at random in criterion
and direction; a judge that turns lenient to a hack disagrees on the same criterion, in
the same direction (the training judge pays, the auditor does not), on the hacked
rollouts, which the top tail's over-sampling picks. So each alarm pools the audited items
of the last ``audit.window`` audited steps (this one included) and asks whether their
disagreement is more than the run's history makes likely (:mod:`amaris.trust.audit.stats`: a
one-sided binomial test at ``audit.false_alarm_rate``, against the rate the audited steps
before the window show, shrunk towards a prior while they are few). It fires on a step
when:

- ``diverging``: over the window the sample's mean training reward rose by at least
  ``audit.min_trend`` while its mean audit reward fell by at least as much, and the
  window's graded rollouts the training judge rewarded above the auditor are more than
  the history's share of them makes likely;
- ``gap_jump``: the window's mean top-tail gap ``|training - audit|`` is at least
  ``audit.max_gap_jump``, and one criterion's verdicts on the window's graded top tail
  paid more than the auditor's more often than the history's rate on the other criteria
  makes likely (noise falls on any criterion alike; a drift on one does not raise the
  rate it is tested against as the history takes it in). Each criterion is tested at
  ``false_alarm_rate`` over the number tested (Bonferroni), so that over all of them a
  steady step fires with at most that chance;
- ``swap_blind``: the over-rewarded top-tail rollouts of the window that were put to the
  training judge again with their final answer swapped for a wrong one (the swap checks,
  ``audit.swap_checks``) were paid like the originals more often than the history's
  share of such checks makes likely (shrunk towards ``audit.prior_swap_blind``). A judge
  lenient to padding or a confident opener pays the swapped reply as it paid the
  original; an honest one, however its auditor disagrees, does not. Each check adds the
  evidence of a whole step's top tail: two blind checks of two are enough at the
  defaults, so a drift the auditor sees at the drift step and the next fires there;
- ``top_tail``: the auditor keeps less than ``audit.min_top_tail_agreement`` of the
  step's sampled top tail there (at least :data:`MIN_TOP_TAIL` graded), and fewer than the
  history's share of kept top-tail rollouts makes likely.

Each test raises a false alarm on a steady step with probability at most
``false_alarm_rate`` (so a steady step at most four times it, in all); the price is that
a drift needs enough audited items to be told from noise: with one top-tail rollout
audited a step and an auditor reading 10% of verdicts otherwise, three steps of
``gap_jump``, two of ``swap_blind``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from amaris.settings import AuditSettings
from amaris.trust.audit.models import (
    Alarm,
    AlarmEvidence,
    AuditedRollout,
    CriterionDisagreement,
    CriterionTally,
    DisagreeingRollout,
    Fidelity,
)
from amaris.trust.audit.stats import binomial_tail, steady_rate

MIN_TOP_TAIL = 2
"""Fewest graded top-tail rollouts the top-tail alarm reads."""
ROLLOUT_PRIOR = 0.5
"""The prior share of over-rewarded rollouts, and of top-tail rollouts the auditor does
not keep there, before the history shows its own (``audit.prior_weight`` rollouts' worth):
uninformative, so that the first steps alarm only on overwhelming evidence."""
EVIDENCE_ROLLOUTS = 5
"""Most disagreeing rollouts given to the analyzer and updater."""
EVIDENCE_CRITERIA = 5
"""Most disagreed criteria given to them."""
EVIDENCE_CHARS = 600
"""Characters kept of an evidence rollout's prompt and reply each."""


@dataclass(frozen=True)
class SwapTally:
    """A step's swap checks: over-rewarded top-tail rollouts put to the training judge
    with their final answer swapped, and those it paid like the original."""

    checked: int = 0
    blind: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.blind <= self.checked:
            raise ValueError(f"swap checks need 0 <= blind <= checked, not {self}")


@dataclass(frozen=True)
class TrendPoint:
    """One audited step's sample figures: what the alarm pools over the window and what
    the history before it shows."""

    step: int
    training: float
    audit: float
    gap: float | None = None
    """Mean ``|training - audit|`` of the step's sampled top tail."""
    graded: int = 0
    over_rewarded: int = 0
    """Graded rollouts the training judge rewarded above the auditor."""
    top_tail_sampled: int = 0
    top_tail_kept: int = 0
    tally: tuple[CriterionTally, ...] = ()
    """Per criterion over the graded top tail (:class:`CriterionTally`)."""
    swaps: SwapTally | None = None
    """The step's swap checks (None: none made)."""


def point_of(step: int, fid: Fidelity, swaps: SwapTally | None = None) -> TrendPoint | None:
    """A step's :class:`TrendPoint` from its fidelity (and swap checks); None without
    sample means."""
    if fid.training_mean is None or fid.audit_mean is None:
        return None
    return TrendPoint(
        step=step,
        training=fid.training_mean,
        audit=fid.audit_mean,
        gap=fid.top_tail_gap,
        graded=fid.sampled,
        over_rewarded=fid.over_rewarded,
        top_tail_sampled=fid.top_tail_sampled,
        top_tail_kept=fid.top_tail_kept,
        tally=tuple(fid.tally),
        swaps=swaps,
    )


def check_alarm(
    current: Fidelity,
    step: int,
    earlier: Sequence[TrendPoint],
    settings: AuditSettings,
    swaps: SwapTally | None = None,
) -> Alarm | None:
    """The alarm this step's audit (and its swap checks) raises, if any. ``earlier``:
    audited steps before this one, oldest first (the last ``window - 1`` join this one in
    the window; those before are the history the window is compared with)."""
    split = max(0, len(earlier) - (settings.window - 1))
    history = earlier[:split]
    now = point_of(step, current, swaps)
    if now is not None:
        window = [*earlier[split:], now]
        found = (
            diverging(window, history, settings)
            or gap_jump(window, history, settings)
            or swap_blind(window, history, settings)
        )
        if found is not None:
            return found
    return top_tail(current, step, history, settings)


def diverging(
    window: Sequence[TrendPoint], history: Sequence[TrendPoint], settings: AuditSettings
) -> Alarm | None:
    """The ``diverging`` alarm: over ``window`` (two audited steps or more) the training
    mean rose and the audit mean fell by ``audit.min_trend`` each, and the window's
    over-rewarded rollouts are significantly more than ``history``'s share."""
    if len(window) < 2:
        return None
    first, last = window[0], window[-1]
    rise, fall = last.training - first.training, first.audit - last.audit
    if rise < settings.min_trend or fall < settings.min_trend:
        return None
    graded = sum(p.graded for p in window)
    over = sum(p.over_rewarded for p in window)
    rate = steady_rate(
        sum(p.over_rewarded for p in history),
        sum(p.graded for p in history),
        ROLLOUT_PRIOR,
        settings.prior_weight,
    )
    chance = binomial_tail(over, graded, rate)
    if chance > settings.false_alarm_rate:
        return None
    return Alarm(
        kind="diverging",
        reason=(
            f"from step {first.step} to step {last.step} the training reward "
            f"rose by {rise:.3f} ({first.training:.3f} -> {last.training:.3f}) "
            f"while the audit reward fell by {fall:.3f} ({first.audit:.3f} -> "
            f"{last.audit:.3f}), and {over} of the {graded} rollouts graded were "
            f"over-rewarded (chance {chance:.2g} at the steady share {rate:.3f}); "
            f"audit.min_trend is {settings.min_trend}, audit.false_alarm_rate "
            f"{settings.false_alarm_rate}"
        ),
    )


def _pooled(points: Sequence[TrendPoint]) -> dict[tuple[str, str], tuple[int, int]]:
    """Per criterion (id, text): (pairs, paid more) summed over ``points``."""
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for point in points:
        for tally in point.tally:
            found = sums[(tally.id, tally.text)]
            found[0] += tally.pairs
            found[1] += tally.paid_more
    return {key: (pairs, paid) for key, (pairs, paid) in sums.items()}


def _mean_gap(points: Sequence[TrendPoint]) -> float | None:
    gaps = [p.gap for p in points if p.gap is not None]
    return sum(gaps) / len(gaps) if gaps else None


def gap_jump(
    window: Sequence[TrendPoint], history: Sequence[TrendPoint], settings: AuditSettings
) -> Alarm | None:
    """The ``gap_jump`` alarm: the window's mean top-tail gap at least
    ``audit.max_gap_jump``, and a criterion read against the training judge's payment
    significantly more often over the window's top tail than ``history`` reads the other
    criteria (Bonferroni over the criteria the window tested)."""
    gap = _mean_gap(window)
    if gap is None or gap < settings.max_gap_jump:
        return None
    seen = _pooled(history)
    all_pairs = sum(pairs for pairs, _ in seen.values())
    all_paid = sum(paid for _, paid in seen.values())
    tested = _pooled(window)
    level = settings.false_alarm_rate / max(1, len(tested))
    best: tuple[float, tuple[str, str], int, int, float] | None = None
    for key, (pairs, paid) in sorted(tested.items()):
        # The steady rate from the other criteria's history: noise falls on any criterion
        # alike, and a drift on this one (once the history holds some of it) does not
        # raise the rate it is tested against.
        before_pairs, before_paid = seen.get(key, (0, 0))
        rate = steady_rate(
            all_paid - before_paid,
            all_pairs - before_pairs,
            settings.prior_disagreement,
            settings.prior_weight,
        )
        chance = binomial_tail(paid, pairs, rate)
        if best is None or chance < best[0]:
            best = (chance, key, pairs, paid, rate)
    if best is None or best[0] > level:
        return None
    chance, (cid, text), pairs, paid, rate = best
    steps = ", ".join(str(p.step) for p in window)
    return Alarm(
        kind="gap_jump",
        reason=(
            f"over steps {steps} the mean gap between the training and audit rewards of "
            f"the sampled top tail was {gap:.3f}, and the "
            f"training judge paid criterion {cid} ({text[:120]!r}) where the auditor did "
            f"not on {paid} of {pairs} top-tail rollouts (chance {chance:.2g} at its "
            f"steady rate {rate:.3f}; the level is audit.false_alarm_rate "
            f"{settings.false_alarm_rate} over {len(tested)} criteria); "
            f"audit.max_gap_jump is {settings.max_gap_jump}"
        ),
    )


def _swaps(points: Sequence[TrendPoint]) -> tuple[int, int]:
    """(checked, blind) summed over ``points``."""
    found = [p.swaps for p in points if p.swaps is not None]
    return sum(s.checked for s in found), sum(s.blind for s in found)


def swap_blind(
    window: Sequence[TrendPoint], history: Sequence[TrendPoint], settings: AuditSettings
) -> Alarm | None:
    """The ``swap_blind`` alarm: the window's swap checks paid like the originals
    significantly more often than ``history``'s share of them (shrunk towards
    ``audit.prior_swap_blind``)."""
    checked, blind = _swaps(window)
    if blind == 0:
        return None
    before_checked, before_blind = _swaps(history)
    rate = steady_rate(
        before_blind, before_checked, settings.prior_swap_blind, settings.prior_weight
    )
    chance = binomial_tail(blind, checked, rate)
    if chance > settings.false_alarm_rate:
        return None
    steps = ", ".join(str(p.step) for p in window)
    return Alarm(
        kind="swap_blind",
        reason=(
            f"over steps {steps} the training judge paid {blind} of the {checked} "
            f"over-rewarded top-tail rollouts with their final answer swapped for a wrong "
            f"one like the originals (chance {chance:.2g} at the steady share {rate:.3f}; "
            f"audit.false_alarm_rate is {settings.false_alarm_rate}): it pays for "
            f"something other than the answer"
        ),
    )


def top_tail(
    current: Fidelity, step: int, history: Sequence[TrendPoint], settings: AuditSettings
) -> Alarm | None:
    """The ``top_tail`` alarm: the auditor keeps less than
    ``audit.min_top_tail_agreement`` of the step's sampled top tail (at least
    :data:`MIN_TOP_TAIL`), and significantly less than ``history``'s share."""
    agreement = current.top_tail_agreement
    sampled = current.top_tail_sampled
    if agreement is None or sampled < MIN_TOP_TAIL or agreement >= settings.min_top_tail_agreement:
        return None
    lost = sampled - current.top_tail_kept
    rate = steady_rate(
        sum(p.top_tail_sampled - p.top_tail_kept for p in history),
        sum(p.top_tail_sampled for p in history),
        ROLLOUT_PRIOR,
        settings.prior_weight,
    )
    chance = binomial_tail(lost, sampled, rate)
    if chance > settings.false_alarm_rate:
        return None
    return Alarm(
        kind="top_tail",
        reason=(
            f"step {step}: the auditor keeps {agreement:.0%} of the "
            f"{sampled} sampled top-tail rollouts in the top tail "
            f"(chance {chance:.2g} at the steady share {rate:.3f} it does not keep; "
            f"audit.min_top_tail_agreement is {settings.min_top_tail_agreement}, "
            f"audit.false_alarm_rate {settings.false_alarm_rate})"
        ),
    )


def evidence(
    step: int,
    alarm: Alarm,
    rollouts: Sequence[AuditedRollout],
    criteria: Sequence[CriterionDisagreement],
) -> AlarmEvidence:
    """What the analyzer and updater are shown: the alarm's reason, the rollouts the two
    judges rewarded most differently (clipped) and the criteria they read most
    differently."""
    # The rollouts the training judge paid more than the auditor: what it now pays for.
    graded = sorted(
        (r for r in rollouts if r.audit is not None and r.training > r.audit),
        key=lambda r: (-r.gap, r.rollout_id),
    )
    return AlarmEvidence(
        step=step,
        reason=alarm.reason,
        rollouts=[
            DisagreeingRollout(
                rollout_id=r.rollout_id,
                input=r.input[:EVIDENCE_CHARS],
                output=r.output[:EVIDENCE_CHARS],
                output_words=r.output_words,
                training_reward=r.training,
                audit_reward=r.audit if r.audit is not None else 0.0,
            )
            for r in graded[:EVIDENCE_ROLLOUTS]
        ],
        criteria=[c for c in criteria if c.disagreement > 0][:EVIDENCE_CRITERIA],
    )
