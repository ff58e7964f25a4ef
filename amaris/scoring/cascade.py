"""The calibrated cascade (``scoring.cascade``): the cheap scorer judges every rollout
first; the scorer (the strong judge) only those whose cheap verdict is not sure enough, and
a small random share of the others, which keeps the threshold honest
(:mod:`amaris.scoring.calibration`).

A rollout's confidence is its reward's
(:func:`~amaris.scoring.reward_confidence.reward_confidence`): that of the least confident
judged criterion (logprob margin, or the agreement of k samples:
:func:`~amaris.scoring.verdicts.criterion_confidence`) whose verdict, with the less
confident ones, could move the reward by more than ``tolerance``. One doubtful criterion
that can move the reward is enough to ask the scorer (a mean would let sure criteria hide
it); one that cannot, such as a pitfall on a reward already clamped at 0, is not.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from amaris.llm.gateway import LLMGateway
from amaris.metric_families import counted
from amaris.models import ScoreRequest
from amaris.rubric.aggregate import aggregate
from amaris.rubric.model import RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.calibration import Calibration, Pair, take_audits
from amaris.scoring.judgement import Judgement
from amaris.scoring.reward_confidence import reward_confidence
from amaris.scoring.scorer import Scorer
from amaris.settings import CHEAP_SCORER, Settings
from amaris.trust.learned_rules import LearnedRules

REMEMBERED = 65_536
"""Rollouts decided by the cheap scorer whose confidence and reward are kept, newest, for
the audit of their step to pair with."""
AUDIT_SCAN_SECONDS = 10.0
"""How often the data folder is looked at for audits left for the cascade."""


def reward(judgement: Judgement) -> float:
    """The reward of a judgement with verdicts (as :func:`~amaris.scoring.reward.reward_of`
    aggregates it)."""
    verdicts = judgement.breakdown or ()
    return aggregate([c.weight for c in verdicts], [c.verdict for c in verdicts])


def _draw(request: ScoreRequest) -> float:
    """A uniform draw in [0, 1) of the rollout (its step, id and reply): the same rollout
    sent again draws the same, whatever the order rollouts arrive in."""
    rollout = request.rollout
    digest = hashlib.blake2b(digest_size=8)
    for part in (str(request.metadata.current_step), rollout.id, rollout.output):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)
    return int.from_bytes(digest.digest(), "big") / 2.0**64


class CascadeScorer(Scorer):
    """The scorer behind a cheap one: what the hot path judges with when the cascade is on.

    Its :attr:`counters` add, per rollout judged: ``cascade.cheap`` or ``cascade.strong``
    (the judge that decided), ``cascade.escalated`` (under the threshold, or the cheap
    scorer gave no verdict: ``cascade.cheap_unscored``) or ``cascade.probed`` (sure
    enough, judged by the scorer too for calibration); and ``cascade.audit_pairs``.
    """

    def __init__(
        self,
        settings: Settings,
        gateway: LLMGateway,
        store: RubricStore,
        prompt: str,
        *,
        learned_rules: LearnedRules | None = None,
        calibration: Calibration | None = None,
        audits: Path | None = None,
    ) -> None:
        """``calibration``: by default one persisted in the data folder; ``audits``: the
        folder audits are left in (default: the data folder)."""
        strong = settings.agents.for_agent("scorer")
        super().__init__(
            settings.scoring,
            gateway,
            store,
            prompt,
            samples=strong.samples,
            logprobs=strong.logprobs,
            learned_rules=learned_rules,
        )
        cheap = settings.agents.for_agent(CHEAP_SCORER)
        self.cheap = Scorer(
            settings.scoring,
            gateway,
            store,
            prompt,
            samples=cheap.samples,
            logprobs=cheap.logprobs,
            agent=CHEAP_SCORER,
            name="cheap",
        )
        # One set of counters: the cheap judge's refusals and replies show in /healthz.
        self.cheap.counters = self.counters
        self._cascade = settings.scoring.cascade
        self.calibration = calibration or Calibration(self._cascade, settings.memory.path)
        self._audits = settings.memory.path if audits is None else audits
        self._next_scan = 0.0
        self._decided: OrderedDict[tuple[int, str], tuple[float, float]] = OrderedDict()
        """(step, rollout id) of the rollouts the cheap scorer decided: its confidence and
        reward."""
        self._saving = asyncio.Lock()

    @property
    def pending(self) -> int:
        """Distinct judge calls queued or in flight, of both judges."""
        return super().pending + self.cheap.pending

    async def judge(
        self,
        request: ScoreRequest,
        rubric: RubricVersion | None = None,
        *,
        counts: Counter[str] | None = None,
    ) -> Judgement:
        """The cheap scorer's judgement when its confidence reaches the threshold (and the
        rollout is not probed), else the scorer's; see :meth:`Scorer.judge`."""
        rubric = rubric or self.rubric()
        if not rubric.judged:
            return await super().judge(request, rubric, counts=counts)
        tally = self.counters if counts is None else counts
        await self._read_audits()
        own: Counter[str] = Counter()
        first = await self.cheap.judge(request, rubric, counts=own)
        sure = (
            None
            if first.breakdown is None
            else reward_confidence(first.breakdown, first.confidence, self._cascade.tolerance)
        )
        if sure is not None:  # the strata's sizes count every rollout, paired or not
            self.calibration.observe(sure)
        confident = sure is not None and sure >= self.calibration.threshold
        probed = confident and _draw(request) < self._cascade.probe_share
        if sure is not None and confident and not probed:
            tally.update(own)
            tally["cascade.cheap"] += 1
            self._remember(request, sure, reward(first))
            return first
        if first.breakdown is None:
            tally["cascade.cheap_unscored"] += 1
        tally["cascade.probed" if probed else "cascade.escalated"] += 1
        strong = await super().judge(request, rubric, counts=counts)
        if strong.breakdown is not None:
            tally["cascade.strong"] += 1
            # A cached answer was paired when it was judged.
            if sure is not None and not strong.cached:
                weight = 1.0 / self._cascade.probe_share if probed else 1.0
                await self._add([Pair(sure, reward(first), reward(strong), weight)])
        return strong

    def _remember(self, request: ScoreRequest, sure: float, cheap: float) -> None:
        key = (request.metadata.current_step, request.rollout.id)
        self._decided[key] = (sure, cheap)
        self._decided.move_to_end(key)
        while len(self._decided) > REMEMBERED:
            self._decided.popitem(last=False)

    async def _add(self, pairs: list[Pair]) -> None:
        if not self.calibration.add(pairs):
            return
        # Recalibrated: persist what it was computed from (a snapshot taken now, written
        # off the event loop, one write at a time).
        text = self.calibration.snapshot()
        async with self._saving:
            await asyncio.to_thread(self.calibration.save, text)

    async def _read_audits(self) -> None:
        """Pair the cheap verdicts it served with the audits left for it since the last look
        (at most every :data:`AUDIT_SCAN_SECONDS`)."""
        now = time.monotonic()
        if now < self._next_scan:
            return
        self._next_scan = now + AUDIT_SCAN_SECONDS
        drops = await asyncio.to_thread(take_audits, self._audits)
        pairs = []
        for drop in drops:
            for rollout_id, audit in drop.rewards.items():
                served = self._decided.pop((drop.step, rollout_id), None)
                if served is not None:
                    pairs.append(Pair(served[0], served[1], audit, drop.weight))
        if pairs:
            self.counters["cascade.audit_pairs"] += len(pairs)
            await self._add(pairs)


CASCADE_OUTCOMES = ("cheap", "strong", "escalated", "probed", "cheap_unscored", "audit_pairs")
"""The cascade's counters (``cascade.<outcome>``), exported at 0 from the start."""


def cascade_metrics(scorer: Scorer) -> Iterable[Metric]:
    """When the cascade is on: ``amaris_cascade{outcome}`` (its counters), and
    ``amaris_cascade_threshold`` and ``amaris_cascade_pairs`` (its calibration now; the
    threshold only once the pairs hold the target)."""
    if not isinstance(scorer, CascadeScorer):
        return
    yield counted(
        "amaris_cascade",
        "The calibrated cascade, per rollout judged: the judge that decided (cheap, strong), "
        "why the scorer judged it (escalated, probed), cheap scorer gave no verdict; and "
        "calibration pairs from the audit.",
        "outcome",
        CASCADE_OUTCOMES,
        dict(scorer.counters),
        "cascade.",
    )
    calibration = scorer.calibration
    yield GaugeMetricFamily(
        "amaris_cascade_pairs",
        "Calibration pairs kept (rollouts both judges judged).",
        value=len(calibration.pairs),
    )
    if math.isfinite(calibration.threshold):
        yield GaugeMetricFamily(
            "amaris_cascade_threshold",
            "The cheap scorer's confidence from which it decides alone (absent while every "
            "rollout is escalated).",
            value=calibration.threshold,
        )
