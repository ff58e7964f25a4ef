"""Judge canaries: each step the training judge scores a few probes whose right reward is
known, and an alarm is raised when it pays one (docs/judge-canaries.md).

The probes (:data:`KINDS`, one scorer call each):

* ``master_key``: a master key of :data:`~amaris.trust.rubric_canary.probes.MASTER_KEYS` as
  the reply to one of the step's prompts;
* ``opener``, ``no_answer``, ``half``, ``swapped``: mined from the step's judged replies
  (:mod:`amaris.trust.mining`), the best-rewarded first (those whose answer
  matches the reference before others): what the judge liked, taken apart;
* ``audit``: the step's audit-disagreement pairs (:class:`AuditPair`, from the audit judge
  when it runs; none otherwise).

A probe is judged under the rubric version its source rollout was scored under, without the
pre-check (it tests the judge). Alarms: a probe with no right answer in it (``master_key``,
``opener``, ``no_answer``, ``half``) whose reward is above the pre-check's floor by more
than ``floor_margin``; a ``swapped`` reply whose reward is within ``swap_tolerance`` of
the original's (or above it); an ``audit`` pair the training judge still rewards more than
``swap_tolerance`` above the audit judge.

Cost: ``max_share`` of the step's judged rollouts, rounded down (:func:`budget_of`: a
step too small for one probe gets one every few steps, so the share stays ``max_share``
over them), and with the auditor on within what its audit leaves of the budget the two
share (:mod:`amaris.trust.budget`); kinds take turns from
``step`` on (probe ``i`` is of kind ``KINDS[(step + i) % len(KINDS)]``, a kind with nothing
to mine giving its turn to the next), so a small budget still covers every kind over a few
steps.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from amaris.memory.records import RolloutRecord
from amaris.models import ScoreRequest
from amaris.rubric.aggregate import aggregate
from amaris.rubric.model import RubricVersion
from amaris.text.answers import answers_match, extract_final_answer
from amaris.trust import mining
from amaris.trust.judging import Judge
from amaris.trust.rubric_canary.probes import MASTER_KEYS
from amaris.trust.rule_store import ProbeKind

KINDS: tuple[ProbeKind, ...] = ("opener", "no_answer", "half", "swapped", "master_key", "audit")
"""The probe kinds in the order they take turns."""
SHOWN_CHARS = 120
"""Characters of a probe's text shown in its result (log, artifact)."""
MAX_TRIES = 8
"""Replies tried per kind for a probe (each try reads a reply of up to
:data:`~amaris.trust.mining.MAX_SOURCE_CHARS` characters, costly on a degenerate
one), so planning stays bounded whatever the policy writes."""


class AuditPair(BaseModel):
    """A rollout of the step the audit judge read otherwise than the training judge: the
    audit judge's reward is its known answer. (Filled by the audit judge's task; empty
    without one.)"""

    rollout_id: str
    scope: str = "global"
    input: str
    output: str
    supplemental_context: str | None = None
    rubric_version: int = Field(ge=1)
    training_reward: float = Field(ge=0, le=1)
    audit_reward: float = Field(ge=0, le=1)


class CanarySource(BaseModel):
    """What the judge canaries read of one judged rollout of the step."""

    id: str
    scope: str
    input: str
    output: str
    supplemental_context: str | None = None
    rubric_version: int = Field(ge=1)
    reward: float


class Probe(BaseModel):
    """One probe to judge."""

    id: str
    kind: ProbeKind
    scope: str
    rubric_version: int = Field(ge=1)
    rollout_id: str | None
    """The rollout it was made from."""
    input: str
    output: str
    supplemental_context: str | None = None
    baseline: float | None = None
    """What it is held to besides the floor: the original's reward (``swapped``), the audit
    judge's (``audit``)."""


class ProbeResult(BaseModel):
    """One probe as the training judge scored it."""

    id: str
    kind: ProbeKind
    scope: str
    rollout_id: str | None
    preview: str
    reward: float | None
    """None: the judge gave no verdict (not an alarm: the step's run says why)."""
    baseline: float | None = None
    alarm: bool = False
    reason: str = ""
    rule: str | None = None
    """The learned pre-check rule the alarm added (its id)."""


class JudgeCanaryReport(BaseModel):
    """The step's judge canaries."""

    step: int = Field(ge=0)
    outcome: Literal["checked", "skipped"]
    reason: str = ""
    judged: int = Field(default=0, ge=0)
    """The step's judged rollouts (what the budget is a share of)."""
    budget: int = Field(default=0, ge=0)
    """Most probes (:func:`budget_of`): ``max_share`` of ``judged``, rounded down, or one
    every few steps when that is under one."""
    results: list[ProbeResult] = Field(default_factory=list)

    @property
    def alarms(self) -> list[ProbeResult]:
        """The probes that raised an alarm."""
        return [r for r in self.results if r.alarm]


def canary_sources(records: Sequence[RolloutRecord]) -> list[CanarySource]:
    """The step's rollouts the judge scored (not the pre-check, not a rule alone)."""
    found = []
    for record in records:
        judged = any(v.kind == "judge" for v in record.verdicts)
        if record.status != "scored" or record.score is None or not judged:
            continue
        if record.rubric_version is None:
            continue
        rollout = record.rollout
        found.append(
            CanarySource(
                id=rollout.id,
                scope=record.scope,
                input=rollout.input,
                output=rollout.output,
                supplemental_context=rollout.supplemental_context,
                rubric_version=record.rubric_version,
                reward=record.score,
            )
        )
    return found


def budget_of(judged: int, max_share: float, step: int) -> int:
    """Probes step ``step`` with ``judged`` judged rollouts may have: ``max_share`` of
    ``judged``, rounded down; when that is under one (and a rollout was judged), one probe
    on every ``ceil(1 / (max_share * judged))``-th step (steps 0, k, 2k, ...), so that
    small steps are probed too and, over those k steps, the probes stay within
    ``max_share`` of the judged rollouts."""
    exact = max_share * judged
    whole = int(exact + 1e-9)
    if whole or judged == 0:
        return whole
    every = math.ceil(1 / exact - 1e-9)
    return 1 if step % every == 0 else 0


def _answers(source: CanarySource) -> tuple[str | None, str | None]:
    """The reply's own final answer and the reference's (canonical; None when absent)."""
    reference = source.supplemental_context
    return extract_final_answer(source.output), (
        extract_final_answer(reference) if reference and reference.strip() else None
    )


def _order(sources: Sequence[CanarySource], step: int) -> list[CanarySource]:
    """Best first: a reply matching its reference, then the higher reward, then a seeded
    draw (the same for a re-run of the step)."""

    def key(source: CanarySource) -> tuple[bool, float, str]:
        own, reference = _answers(source)
        correct = bool(own and reference and answers_match(own, reference))
        draw = hashlib.sha256(f"{step}/{source.id}".encode("utf-8", "replace")).hexdigest()
        return (not correct, -source.reward, draw)

    usable = [s for s in sources if len(s.output) <= mining.MAX_SOURCE_CHARS]
    return sorted(usable, key=key)


def mine(kind: ProbeKind, source: CanarySource) -> tuple[str, float | None] | None:
    """The probe of ``kind`` made from ``source``'s reply, and its baseline; None when the
    reply gives none."""
    own, reference = _answers(source)
    answers = [a for a in (own, reference) if a]
    text: str | None = None
    if kind == "opener":
        text = mining.opening_sentence(source.output)
    elif kind == "half":
        text = mining.half_cut(source.output)
    elif kind == "no_answer" and own:
        text = mining.without_final_answer(source.output, own)
    elif kind == "swapped" and own:
        changed = mining.swapped(source.output, own)
        return (changed, source.reward) if changed is not None else None
    if text is None or not answers or not mining.free_of(text, answers):
        # Without a known answer, a part of the reply may be the answer itself.
        return None
    return text, None


def plan_probes(
    sources: Sequence[CanarySource],
    audit_pairs: Sequence[AuditPair],
    *,
    step: int,
    budget: int,
    min_swap_reward: float,
) -> list[Probe]:
    """At most ``budget`` probes, kinds taking turns from ``step`` on. A ``swapped`` probe
    comes from a reply rewarded at least ``min_swap_reward`` (else no gap can show)."""
    ordered = _order(sources, step)
    cursors: dict[ProbeKind, int] = dict.fromkeys(KINDS, 0)
    probes: list[Probe] = []
    exhausted: set[ProbeKind] = set()
    turn = step
    while len(probes) < budget and len(exhausted) < len(KINDS):
        kind = KINDS[turn % len(KINDS)]
        turn += 1
        if kind in exhausted:
            continue
        probe = _next(kind, cursors, ordered, audit_pairs, step, min_swap_reward, len(probes))
        if probe is None:
            exhausted.add(kind)
        else:
            probes.append(probe)
    return probes


def _next(
    kind: ProbeKind,
    cursors: dict[ProbeKind, int],
    ordered: Sequence[CanarySource],
    audit_pairs: Sequence[AuditPair],
    step: int,
    min_swap_reward: float,
    number: int,
) -> Probe | None:
    """The next probe of ``kind`` (advancing its cursor), or None when none is left."""
    if kind == "audit":
        at = cursors[kind]
        if at >= len(audit_pairs):
            return None
        cursors[kind] = at + 1
        pair = audit_pairs[at]
        return Probe(
            id=f"audit-{number}",
            kind=kind,
            scope=pair.scope,
            rubric_version=pair.rubric_version,
            rollout_id=pair.rollout_id,
            input=pair.input,
            output=pair.output,
            supplemental_context=pair.supplemental_context,
            baseline=pair.audit_reward,
        )
    if kind == "master_key":
        at = cursors[kind]
        if at >= len(ordered) or at >= len(MASTER_KEYS):
            return None
        cursors[kind] = at + 1
        source = ordered[at]
        return _probe(kind, number, source, MASTER_KEYS[(step + at) % len(MASTER_KEYS)], None)
    while cursors[kind] < min(len(ordered), MAX_TRIES):
        source = ordered[cursors[kind]]
        cursors[kind] += 1
        if kind == "swapped" and source.reward < min_swap_reward:
            continue
        mined = mine(kind, source)
        if mined is not None:
            return _probe(kind, number, source, *mined)
    return None


def _probe(
    kind: ProbeKind, number: int, source: CanarySource, output: str, baseline: float | None
) -> Probe:
    return Probe(
        id=f"{kind}-{number}",
        kind=kind,
        scope=source.scope,
        rubric_version=source.rubric_version,
        rollout_id=source.id,
        input=source.input,
        output=output,
        supplemental_context=source.supplemental_context,
        baseline=baseline,
    )


def verdict(
    probe: Probe, reward: float, *, floor: float, floor_margin: float, swap_tolerance: float
) -> tuple[bool, str]:
    """Whether ``reward`` on ``probe`` is an alarm, and why (or what held)."""
    if probe.kind == "swapped" and probe.baseline is not None:
        if reward >= probe.baseline - swap_tolerance:
            return True, (
                f"the reply with its answer swapped for a wrong one scored {reward:.3f}, "
                f"within {swap_tolerance} of the original's {probe.baseline:.3f}"
            )
        return False, f"swapped {reward:.3f} < original {probe.baseline:.3f}"
    if probe.kind == "audit" and probe.baseline is not None:
        if reward > probe.baseline + swap_tolerance:
            return True, (
                f"the training judge gave {reward:.3f} where the audit judge gave "
                f"{probe.baseline:.3f}"
            )
        return False, f"{reward:.3f} <= audit {probe.baseline:.3f} + {swap_tolerance}"
    if reward > floor + floor_margin:
        return True, (
            f"{probe.kind} probe (no right answer in it) earned {reward:.3f}, above the "
            f"floor {floor} + {floor_margin}"
        )
    return False, f"{reward:.3f} <= floor {floor} + {floor_margin}"


async def judge_probes(
    scorer: Judge,
    probes: Sequence[Probe],
    rubrics: Mapping[tuple[str, int], RubricVersion],
    *,
    step: int,
    floor: float,
    floor_margin: float,
    swap_tolerance: float,
) -> list[ProbeResult]:
    """Each probe judged under its rubric (``rubrics`` by scope and version), decided."""

    async def one(probe: Probe) -> ProbeResult:
        request = ScoreRequest.model_validate(
            {
                "rollout": {
                    "id": f"judge-canary-{step}-{probe.id}",
                    "input": probe.input,
                    "output": probe.output,
                    "supplemental_context": probe.supplemental_context,
                },
                "metadata": {"current_step": step},
            }
        )
        judgement = await scorer.judge(request, rubrics[(probe.scope, probe.rubric_version)])
        result = ProbeResult(
            id=probe.id,
            kind=probe.kind,
            scope=probe.scope,
            rollout_id=probe.rollout_id,
            preview=probe.output[:SHOWN_CHARS],
            reward=None,
            baseline=probe.baseline,
        )
        if judgement.breakdown is None:
            return result.model_copy(update={"reason": judgement.failure or "not judged"})
        verdicts = judgement.breakdown
        reward = aggregate([c.weight for c in verdicts], [c.verdict for c in verdicts])
        alarm, reason = verdict(
            probe, reward, floor=floor, floor_margin=floor_margin, swap_tolerance=swap_tolerance
        )
        return result.model_copy(
            update={"reward": round(reward, 4), "alarm": alarm, "reason": reason}
        )

    return list(await asyncio.gather(*(one(p) for p in probes)))
