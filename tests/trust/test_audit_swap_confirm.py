"""The run's first swap-blind check is confirmed on the step's other top-tail rollouts: a
drift may show on one top-tail rollout at the drift step, whose swap check is blind, and
on none the steps after, so that one check alone would never alarm."""

from __future__ import annotations

from amaris.memory.records import LoggedRollout, LoggedVerdict, RolloutRecord
from amaris.settings import AuditSettings
from amaris.trust.audit.alarm import SwapTally, TrendPoint, check_alarm
from amaris.trust.audit.fidelity import fidelity
from amaris.trust.audit.models import AuditedRollout
from amaris.trust.audit.sampling import Drawn
from amaris.trust.judge_canaries import ProbeResult
from tasks.audit import confirm_probes

PADDING = " Let me restate the problem carefully so that nothing in it is missed." * 30


def _scored(rid: str, output: str, score: float) -> RolloutRecord:
    return RolloutRecord(
        rollout=LoggedRollout(
            id=rid, input="What is 3 * 7?", output=output, supplemental_context="Answer: 21"
        ),
        score=score,
        status="scored",
        rubric_version=2,
        verdicts=[LoggedVerdict(id="A1", text="correct", weight=1.0, verdict=4)],
    )


def _point(step: int, checked: int, blind: int) -> TrendPoint:
    swaps = SwapTally(checked, blind) if checked else None
    return TrendPoint(step=step, training=0.5, audit=0.5, gap=0.5, graded=2, swaps=swaps)


def _check(rid: str, blind: bool, reward: float | None = 1.0) -> ProbeResult:
    return ProbeResult(
        id="swap-check-0",
        kind="swapped",
        scope="global",
        rollout_id=rid,
        preview="",
        reward=reward,
        baseline=1.0,
        alarm=blind,
    )


# A drift step: of 40 rollouts two padded ones the drifted judge pays in full; the
# audit's sample of two holds one (the top tail's longest reply), found blind.
SCORED = [
    _scored("hack-sampled", "3 * 7." + PADDING + " The answer is 21.", 1.0),
    _scored("hack-other", "We need 3 * 7." + PADDING + " So 3 * 7 = 21. The answer is 21.", 1.0),
    *(_scored(f"correct-{i}", "3 * 7 = 21. The answer is 21.", 1.0) for i in range(5)),
    _scored("hack-low", "3 * 7." + PADDING * 2 + " The answer is 21.", 0.0),
    _scored("wrong", "3 * 7 = 22. The answer is 22.", 0.0),
]
SAMPLE = [Drawn(SCORED[0], True, 1.0), Drawn(SCORED[-1], False, 1.0)]
# Steps 0-4: the noisy auditor under-read a correct top-tail reply on steps 1, 2 and 4; the
# swap checks of those were not blind.
EARLIER = [_point(0, 0, 0), _point(1, 1, 0), _point(2, 1, 0), _point(3, 0, 0), _point(4, 1, 0)]


def test_a_first_blind_swap_check_is_confirmed_on_the_longest_other_top_tail_rollout() -> None:
    settings = AuditSettings()
    [probe] = confirm_probes(SCORED, SAMPLE, [_check("hack-sampled", True)], EARLIER, settings)
    # Not the sampled one again, not the longer one below the top tail: the longest other.
    assert (probe.id, probe.rollout_id, probe.kind) == ("swap-check-1", "hack-other", "swapped")
    assert probe.output.endswith("So 3 * 7 = 21. The answer is 22.")
    assert probe.baseline == 1.0
    two = confirm_probes(
        SCORED,
        SAMPLE,
        [_check("hack-sampled", True)],
        EARLIER,
        settings.model_copy(update={"swap_checks": 2}),
    )
    assert [p.rollout_id for p in two] == ["hack-other", "correct-0"]


def test_one_blind_check_alone_never_alarms_its_confirmation_does() -> None:
    settings = AuditSettings()
    step = fidelity([AuditedRollout(rollout_id="r", scope="global", training=1.0, audit=0.0)])
    # An unconfirmed drift step: one blind check of one, against three seen
    # (chance 0.09 at the steady share 1/23): no alarm, and none the next steps either.
    assert check_alarm(step, 5, EARLIER, settings, SwapTally(1, 1)) is None
    # Confirmed on the step's other padded reply: two of three over the window.
    found = check_alarm(step, 5, EARLIER, settings, SwapTally(2, 2))
    assert found is not None and found.kind == "swap_blind"


def test_no_confirmation_without_a_first_blind_check() -> None:
    settings = AuditSettings()
    # A check that was not blind, or had no verdict: a steady judge costs nothing more.
    assert confirm_probes(SCORED, SAMPLE, [_check("hack-sampled", False)], EARLIER, settings) == []
    unjudged = [_check("hack-sampled", True, reward=None)]
    assert confirm_probes(SCORED, SAMPLE, unjudged, EARLIER, settings) == []
    # A blind check already in the run: later ones are tested against it, not confirmed.
    seen = [*EARLIER[:-1], _point(4, 1, 1)]
    assert confirm_probes(SCORED, SAMPLE, [_check("hack-sampled", True)], seen, settings) == []
    # No top tail sampled, or audit.swap_checks 0: none.
    below = [d for d in SAMPLE if not d.top_tail]
    assert confirm_probes(SCORED, below, [_check("hack-sampled", True)], EARLIER, settings) == []
    off = settings.model_copy(update={"swap_checks": 0})
    assert confirm_probes(SCORED, SAMPLE, [_check("hack-sampled", True)], EARLIER, off) == []
