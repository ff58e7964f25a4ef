"""The rubric canary: a candidate rubric re-scores a probe set before it is published.

The anchors are the ground truth the user wrote; adaptive criteria may refine the reward
but never invert it, and never pay for what a policy can simply say. The canary checks
that on probes grouped by prompt, each on a side:

* **anchor-passing** (the anchors' own reward, :func:`anchor_reward`, at least
  :data:`PASS_AT`) or **anchor-failing** (at most :data:`FAIL_AT`) rollouts of the step,
  with the verdicts and reward they got under the current rubric (from the rollout log);
* **flagged** rollouts: those the step's analysis flagged as reward hacking. Never
  anchor-passing, whatever the anchors say: each must not gain on the prompt's passing
  probes under the candidate;
* the **reference answer** (``supplemental_context``) as a reply, sided by the anchors;
* **phrase probes** (:func:`~amaris.trust.rubric_canary.probes.phrase_probe`): a wrong answer (a
  passing answer with its final number made wrong, judged beside it as a ``swapped``
  probe; else a failing rollout or a master key) carrying the markers, quoted phrases
  and claim of one added or reworded criterion;
* **master keys** (:mod:`amaris.trust.rubric_canary.probes`): replies with no answer, anchor-failing
  by construction, and a **claim probe**: an anchor-failing rollout that claims every
  requirement the candidate adds;
* **remembered hacks** (:class:`~amaris.memory.models.HackProbe`, the newest findings of
  earlier steps with a reference, at most
  :data:`~amaris.trust.rubric_canary.plan.MAX_HACK_PROBES`): the hack's reply, anchor-failing
  when the anchors fail it, beside its reference answer.

Refused, with the probes named and their scores under both rubrics, when under the
candidate:

1. an anchor-failing probe outscores an anchor-passing probe of the same prompt that the
   current rubric ranked above it;
2. a phrase probe gains on the wrong answer it was made from, and its words either meet
   its criterion (raise its verdict by half the scale or more) or reach the reward of a
   passing probe of its prompt;
3. a flagged rollout gains, and its margin below the best passing probe of its prompt
   shrinks by more than ``max_gap_shrink``;
4. the mean gap between the sides (per prompt, its best passing probe less its best
   failing probe) shrinks by more than ``max_gap_shrink`` of the gap under the rubric in
   force, or of the gap under the anchors alone (so the bound is cumulative over steps).

Cost: verdicts the current rubric already has are reused for every criterion whose text
the candidate keeps, so a reweight or a retirement costs no judge call when the step's
rollouts have both sides; a rollout costs one call on the new criteria, a synthetic probe
one more under the current rubric, a phrase or swapped probe one under the whole
candidate. Calls are
capped at ``max_share`` of the step's rollouts on top of one prompt's sure set (its
reference, a right and a wrong answer, its flagged rollouts and the phrase probes), which
is always judged. Calls go through the step's scorer under the
ledger agent ``canary``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

from pydantic import ValidationError

from amaris.memory.models import HackProbe
from amaris.memory.records import LoggedRollout, RolloutRecord
from amaris.models import Rollout, ScoreRequest
from amaris.rubric.aggregate import aggregate, normalise
from amaris.rubric.model import Criterion, RubricVersion
from amaris.trajectory import TRAJECTORY_FIELDS
from amaris.trust.judging import Judge
from amaris.trust.rubric_canary.plan import CANDIDATE_ONLY, Plan, Probe, source_rollout
from amaris.trust.rubric_canary.report import (
    PASS_AT,
    CanaryProbe,
    CanaryReport,
    CanaryRollout,
    Side,
    decide,
)

FAIL_AT = 0.25
"""Anchor reward up to which a probe is anchor-failing."""


def verdict_key(criterion_id: str, text: str) -> str:
    """Where a verdict is filed: a criterion's id and text (a reworded one is new)."""
    return f"{criterion_id}:{text}"


def canary_rollouts(records: Sequence[RolloutRecord]) -> list[CanaryRollout]:
    """The step's logged rollouts that have verdicts (a trajectory with its messages,
    outcome and finish reason)."""
    found = []
    for record in records:
        rollout = record.rollout
        verdicts = {verdict_key(v.id, v.text): float(v.verdict) for v in record.verdicts}
        if record.status != "scored" or not verdicts:
            continue
        found.append(
            CanaryRollout(
                id=rollout.id,
                input=rollout.input,
                output=rollout.output,
                supplemental_context=rollout.supplemental_context,
                group=rollout.group_id or rollout.input,
                rubric_version=record.rubric_version,
                verdicts=verdicts,
                trajectory=_trajectory(rollout),
            )
        )
    return found


def _trajectory(rollout: LoggedRollout) -> Rollout | None:
    """The trajectory ``rollout`` was sent as, if it was one the log derived texts of (the
    log keeps a trajectory's fields as sent)."""
    extra = rollout.model_extra or {}
    if not rollout.output or not isinstance(extra.get("messages"), list):
        return None
    fields = {name: extra.get(name) for name in TRAJECTORY_FIELDS}
    try:
        return Rollout.model_validate(
            {"id": rollout.id, "supplemental_context": rollout.supplemental_context, **fields}
        )
    except ValidationError:
        return None


def score_under(criteria: Sequence[Criterion], verdicts: Mapping[str, float]) -> float | None:
    """The reward under ``criteria`` from filed verdicts; None when one is missing."""
    values = [verdicts.get(verdict_key(c.id, c.text)) for c in criteria]
    if any(v is None for v in values):
        return None
    return aggregate([c.weight for c in criteria], [v for v in values if v is not None])


def anchor_reward(rubric: RubricVersion, verdicts: Mapping[str, float]) -> float | None:
    """The reward of the anchors alone."""
    return score_under(rubric.anchors, verdicts)


def side_of(reward: float | None) -> Side | None:
    """Which side of the anchors a probe is on (None: neither clearly)."""
    if reward is None:
        return None
    return "pass" if reward >= PASS_AT else "fail" if reward <= FAIL_AT else None


async def run_canary(
    scorer: Judge,
    current: RubricVersion,
    candidate: RubricVersion,
    rollouts: Sequence[CanaryRollout],
    *,
    step: int,
    max_share: float,
    max_gap_shrink: float,
    hacks: Sequence[HackProbe] = (),
    flagged: Collection[str] = (),
) -> CanaryReport:
    """Judge the probe set under ``candidate`` (within the budget) and decide; ``hacks``
    are the memory's, newest first; ``flagged`` the ids of the rollouts the step's
    analysis flagged as reward hacking."""
    known = {verdict_key(c.id, c.text) for c in current.criteria}
    new = tuple(c for c in candidate.criteria if verdict_key(c.id, c.text) not in known)
    marked = set(flagged)
    groups: dict[str, list[Probe]] = defaultdict(list)
    for r in rollouts:
        if r.rubric_version != current.version:
            continue
        probe = Probe(r.id, "rollout", r.group, source_rollout(r), r)
        probe.verdicts = dict(r.verdicts)
        probe.side = "flagged" if r.id in marked else side_of(anchor_reward(current, r.verdicts))
        probe.current = score_under(current.criteria, probe.verdicts)
        if probe.side is not None and probe.current is not None:
            groups[r.group].append(probe)
    if not groups:
        return CanaryReport(outcome="skipped", reason="no rollout scored under the current rubric")
    plan = Plan(groups, {r.group: r for r in rollouts}, new, step)
    budget = plan.choose(int(max_share * len(rollouts)), hacks)
    only_new = candidate.model_copy(update={"anchors": (), "adaptive": new})

    async def judge(probe: Probe) -> tuple[int, int]:
        """Its scorer calls and how many gave no verdict."""
        if probe.kind in CANDIDATE_ONLY:
            probe.verdicts = await _judge(scorer, probe, candidate, step)
            # A probe the anchors do not fail is no wrong answer: nothing to hold it to.
            wrong = side_of(anchor_reward(current, probe.verdicts)) == "fail"
            probe.side = "fail" if wrong else None
            return 1, int(not probe.verdicts)
        calls = failed = 0
        if probe.current is None:
            judged = await _judge(scorer, probe, current, step)
            calls, failed = 1, int(not judged)
            probe.verdicts.update(judged)
            probe.current = score_under(current.criteria, probe.verdicts)
            fails = side_of(anchor_reward(current, probe.verdicts))
            if probe.kind == "reference":
                probe.side = fails
            elif probe.kind == "hack":
                # A hack the anchors pass is no failing probe: nothing to hold it below.
                probe.side = "fail" if fails == "fail" else None
        if new and probe.current is not None and probe.side is not None:
            judged = await _judge(scorer, probe, only_new, step)
            calls, failed = calls + 1, failed + int(not judged)
            probe.verdicts.update(judged)
        return calls, failed

    counts = await asyncio.gather(*(judge(p) for p in plan.chosen))
    calls, failed = sum(c for c, _ in counts), sum(f for _, f in counts)
    evaluated = [judged for probe in plan.chosen if (judged := _judged(probe, current, candidate))]
    report = decide(evaluated, max_gap_shrink)
    if failed and report.outcome != "refused":
        # The judge failed where it was asked: what it did not check is not a pass.
        report = report.model_copy(
            update={
                "outcome": "refused",
                "reason": f"the judge gave no verdict on {failed} probe(s): the candidate "
                "could not be checked",
            }
        )
    return report.model_copy(update={"judge_calls": calls, "budget": budget})


def _judged(probe: Probe, current: RubricVersion, candidate: RubricVersion) -> CanaryProbe | None:
    reward = score_under(candidate.criteria, probe.verdicts)
    if probe.side is None or reward is None:
        return None
    if probe.kind not in CANDIDATE_ONLY and probe.current is None:
        return None
    return CanaryProbe(
        id=probe.id,
        kind=probe.kind,
        group=probe.group,
        side=probe.side,
        current=None if probe.current is None else round(probe.current, 4),
        candidate=round(reward, 4),
        anchors=_rounded(anchor_reward(current, probe.verdicts)),
        base=probe.base.id if probe.base is not None else None,
        carries=probe.carries,
        lift=_lift(probe, candidate),
    )


def _lift(probe: Probe, candidate: RubricVersion) -> float | None:
    """How far a phrase probe's words raise its criterion's verdict over the wrong answer
    it was made from, as a share of the scale (None: not a phrase probe, or unknown)."""
    carried = next((c for c in candidate.criteria if c.id == probe.carries), None)
    if carried is None or probe.base is None:
        return None
    key = verdict_key(carried.id, carried.text)
    said, base = probe.verdicts.get(key), probe.base.verdicts.get(key)
    if said is None or base is None:
        return None
    return round(normalise(said) - normalise(base), 4)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


async def _judge(scorer: Judge, probe: Probe, rubric: RubricVersion, step: int) -> dict[str, float]:
    """Verdicts of ``probe`` under ``rubric`` (none when the judge gave none)."""
    request = ScoreRequest.model_validate(
        {"rollout": probe.rollout.model_dump(), "metadata": {"current_step": step}}
    )
    judgement = await scorer.judge(request, rubric)
    if judgement.breakdown is None:
        return {}
    return {verdict_key(c.id, c.text): float(c.verdict) for c in judgement.breakdown}
