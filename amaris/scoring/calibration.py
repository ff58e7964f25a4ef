"""The cascade's threshold (``scoring.cascade``): the lowest confidence of the cheap scorer
from which its rewards agree with the scorer's often enough, calibrated on pairs both judged.

A pair is one rollout's cheap confidence, cheap reward and strong reward: every rollout the
cascade escalated (under the threshold, or before the calibration is trusted), a random
``probe_share`` of the confident ones, and those the audit re-graded. The pairs are grouped
in confidence strata (:func:`stratum`), within which they are taken as alike: a stratum's
pairs' share of agreement is that of its rollouts. How many rollouts a stratum holds is
counted, not estimated: the cascade sees every judged rollout's cheap confidence
(:meth:`Calibration.observe`), so each stratum weighs the rollouts it held over the span of
the pairs kept (post-stratification on known sizes). A stratum with rollouts but no pair
counts with the next less confident one that has pairs. A pair's weight, the rollouts it
stands for (1 escalated, 1 / ``probe_share`` probed, a step's judged rollouts over its
audit sample), sizes the strata only for pairs whose rollouts were not counted (a file
written without the counts): summed weights make a small stratum's size swing with its
pairs, one unlucky probe growing it by ten rollouts and making them disagree at once.

The threshold is the lowest confidence ``t`` of a stratum such that over the strata from
``t`` up the share of rollouts whose rewards lie within ``tolerance`` is at least
``target_agreement``, the share taken at its lower bound (:func:`lower_bound`, over the
pairs' effective number: a few lucky pairs must not open the cheap path); it is infinite
(every rollout escalated) under ``min_pairs`` pairs or when no ``t`` holds. It is computed
again every :data:`RECALIBRATE_EVERY` new pairs, over the newest ``max_pairs`` and the
rollouts counted since the oldest of them, which are kept in the data folder across
restarts (:data:`CALIBRATION_FILE`).
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from amaris.private import private_folder
from amaris.rubric.store import write_durably
from amaris.settings import CascadeSettings
from amaris.trust.audit.models import AuditedRollout

log = logging.getLogger("amaris.scoring.cascade")

CALIBRATION_FILE = "cascade-calibration.json"
"""Under ``memory.path``: the calibration pairs (:class:`Calibration`)."""
AUDIT_FOLDER = "cascade-audits"
"""Under ``memory.path``: each audited step's re-graded rewards (:func:`drop_audit`), until
the cascade reads them."""
RECALIBRATE_EVERY = 16
"""New pairs between two calibrations (fewer while ``min_pairs`` is smaller)."""
BOUND_Z = 1.0
"""Standard errors between the pairs' agreement and the lower bound held to the target."""
STRATA_PER_DECADE = 2
"""Confidence strata in a decade of doubt (``1 - confidence``): the pairs of one are taken
as alike (:func:`stratum`)."""
_SURE_STRATUM = 1_000
_EPSILON = 1e-9


@dataclass(frozen=True)
class Pair:
    """One rollout judged by both: the cheap verdict's confidence and both rewards."""

    confidence: float
    cheap: float
    strong: float
    weight: float = 1.0
    """The rollouts it stands for: the inverse of the chance it became a pair (what sizes
    its stratum when its rollouts were not counted)."""


def lower_bound(share: float, pairs: float, z: float = BOUND_Z) -> float:
    """The Wilson lower bound of an agreement ``share`` observed on ``pairs`` (their
    effective number), ``z`` standard errors under it."""
    spread = z * z / pairs
    centre = share + spread / 2
    margin = z * math.sqrt(share * (1 - share) / pairs + spread / (4 * pairs))
    return (centre - margin) / (1 + spread)


def stratum(confidence: float) -> int:
    """The stratum of a confidence, by its doubt ``1 - confidence`` on a log scale, half a
    decade each: 0 is [0, 0.68), 1 [0.68, 0.9), 2 [0.9, 0.968), 3 [0.968, 0.99), 4
    [0.99, 0.9968), 5 [0.9968, 0.999) and so on; a sure confidence (1) is the top one.
    Logprob margins crowd near 1, where what tells verdicts apart is how close they come."""
    doubt = 1.0 - confidence
    if doubt <= 0.0:
        return _SURE_STRATUM
    return min(_SURE_STRATUM - 1, math.floor(-math.log10(doubt) * STRATA_PER_DECADE + _EPSILON))


def threshold(
    pairs: Sequence[Pair],
    target: float,
    tolerance: float,
    min_pairs: int,
    population: Mapping[int, float] | None = None,
) -> float:
    """The lowest confidence from which the pairs agree at ``target`` (module docstring);
    ``math.inf`` under ``min_pairs`` pairs or when none does. ``population``: the rollouts
    each stratum held over the pairs' span (None: the pairs' weights summed per stratum).

    The strata (:func:`stratum`) are walked from the surest down. Within a stratum the
    pairs are taken as alike draws of its rollouts (post-stratification): each stands for the
    stratum's rollouts over its pairs. The effective number of pairs is Kish's,
    ``(sum w)^2 / sum w^2`` over those shares."""
    if len(pairs) < min_pairs:
        return math.inf
    strata: dict[int, list[Pair]] = defaultdict(list)
    for pair in pairs:
        strata[stratum(pair.confidence)].append(pair)
    if population is None:
        population = {key: sum(p.weight for p in members) for key, members in strata.items()}
    agree = total = squares = carried = 0.0
    found = math.inf
    for key in sorted(strata.keys() | population.keys(), reverse=True):
        members = strata.get(key)
        held = population.get(key, 0.0) + carried
        if not members:  # counted with the next less confident stratum that has pairs
            carried = held
            continue
        carried = 0.0
        stands_for = max(held, float(len(members)))
        each = stands_for / len(members)
        agreeing = sum(abs(p.cheap - p.strong) <= tolerance + _EPSILON for p in members)
        agree += each * agreeing
        total += stands_for
        squares += each * stands_for
        if lower_bound(agree / total, total * total / squares) >= target - _EPSILON:
            found = min(p.confidence for p in members)
    return found


Counts = dict[int, float]
"""Rollouts counted per stratum (:func:`stratum`)."""


class _Stored(BaseModel):
    """The calibration file: the pairs, newest last, as ``[confidence, cheap, strong,
    weight]``; with each, the rollouts counted per stratum since the pair before it, as
    ``[stratum, rollouts]`` (and those counted since the newest); the threshold they gave
    (for people: it is computed again on load)."""

    model_config = ConfigDict(extra="ignore")

    threshold: float | None = None
    pairs: list[tuple[float, float, float, float]] = Field(default_factory=list)
    counts: list[list[tuple[int, float]]] | None = None
    pending: list[tuple[int, float]] = Field(default_factory=list)


class Calibration:
    """The pairs, the rollouts counted over their span, and the threshold in force;
    persisted in ``folder`` when given."""

    def __init__(self, settings: CascadeSettings, folder: Path | None = None) -> None:
        self._settings = settings
        self._pairs: deque[Pair] = deque(maxlen=settings.max_pairs)
        self._counts: deque[Counts] = deque(maxlen=settings.max_pairs)
        """With each pair, the rollouts counted since the pair before it."""
        self._pending: Counts = {}
        """The rollouts counted since the newest pair."""
        self._every = min(RECALIBRATE_EVERY, settings.min_pairs)
        self._fresh = 0
        self.path = None if folder is None else folder / CALIBRATION_FILE
        self.threshold = math.inf
        """Cheap verdicts at least this confident decide; ``inf``: every rollout escalated."""
        self._load()

    @property
    def pairs(self) -> tuple[Pair, ...]:
        """The pairs kept, oldest first."""
        return tuple(self._pairs)

    def observe(self, confidence: float) -> None:
        """Count a judged rollout of this cheap confidence (paired or not) in its stratum."""
        key = stratum(confidence)
        self._pending[key] = self._pending.get(key, 0.0) + 1.0

    def population(self) -> Counts:
        """The rollouts counted per stratum over the span of the pairs kept."""
        total: Counts = {}
        for counts in (*self._counts, self._pending):
            for key, rollouts in counts.items():
                total[key] = total.get(key, 0.0) + rollouts
        return total

    def add(self, pairs: Iterable[Pair]) -> bool:
        """Keep ``pairs``; recalibrate when :data:`RECALIBRATE_EVERY` have come since the
        last time, or the pairs just reached ``min_pairs``. Whether it recalibrated."""
        before = len(self._pairs)
        for pair in pairs:
            self._pairs.append(pair)
            self._counts.append(self._pending)
            self._pending = {}
            self._fresh += 1
        reached = before < self._settings.min_pairs <= len(self._pairs)
        if self._fresh >= self._every or reached:
            self.recalibrate()
            return True
        return False

    def recalibrate(self) -> None:
        """The threshold of the pairs kept now, over the rollouts counted (the pairs'
        weights when none was)."""
        s = self._settings
        counted = self.population() or None
        self.threshold = threshold(
            self._pairs, s.target_agreement, s.tolerance, s.min_pairs, counted
        )
        self._fresh = 0

    def snapshot(self) -> str:
        """The calibration file's text now."""
        stored = _Stored(
            threshold=None if math.isinf(self.threshold) else self.threshold,
            pairs=[(p.confidence, p.cheap, p.strong, p.weight) for p in self._pairs],
            counts=[sorted(c.items()) for c in self._counts],
            pending=sorted(self._pending.items()),
        )
        return stored.model_dump_json()

    def save(self, text: str) -> None:
        """Write a :meth:`snapshot` durably (blocking; nothing without a folder)."""
        if self.path is not None:
            write_durably(self.path, text)

    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            stored = _Stored.model_validate(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError, ValidationError) as exc:
            # The pairs are a cache of evidence: without them the cascade escalates
            # everything until it has gathered new ones, which is safe.
            log.warning("cascade calibration %s unreadable, starting afresh: %s", self.path, exc)
            return
        pairs = [Pair(*values) for values in stored.pairs]
        if stored.counts is not None and len(stored.counts) == len(pairs):
            counts = [dict(c) for c in stored.counts]
        else:  # written without the counts: each pair stands for its weight
            counts = [{stratum(p.confidence): p.weight} for p in pairs]
        self._pairs.extend(pairs)
        self._counts.extend(counts)
        self._pending = dict(stored.pending)
        self.recalibrate()


class AuditDrop(BaseModel):
    """An audited step's re-graded rewards, as the audit leaves them for the cascade."""

    model_config = ConfigDict(frozen=True)

    step: int
    population: int = Field(ge=0)
    """The step's judged rollouts the audit sample was drawn from."""
    rewards: dict[str, float]
    """The auditor's reward per re-graded rollout id (those it gave a verdict on)."""

    @property
    def weight(self) -> float:
        """The rollouts each re-graded one stands for: the population over the sample."""
        return self.population / len(self.rewards) if self.rewards else 1.0


def drop_audit(folder: Path, step: int, audited: Sequence[AuditedRollout], population: int) -> None:
    """Leave a step's audit rewards in ``folder`` (the data folder) for the cascade to pair
    with the cheap verdicts it served (blocking)."""
    rewards = {r.rollout_id: r.audit for r in audited if r.audit is not None}
    drop = AuditDrop(step=step, population=population, rewards=rewards)
    target = private_folder(folder / AUDIT_FOLDER)
    write_durably(target / f"step-{step}.json", drop.model_dump_json())


def take_audits(folder: Path) -> list[AuditDrop]:
    """The audits left in ``folder`` (the data folder), removed as they are read; an
    unreadable one is removed and logged (blocking)."""
    inbox = folder / AUDIT_FOLDER
    if not inbox.is_dir():
        return []
    drops: list[AuditDrop] = []
    for path in sorted(inbox.glob("step-*.json")):
        try:
            drops.append(AuditDrop.model_validate_json(path.read_bytes()))
        except (OSError, ValueError) as exc:
            log.warning("cascade: audit drop %s unreadable, skipped: %s", path, exc)
        path.unlink(missing_ok=True)
    return drops
