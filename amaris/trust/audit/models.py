"""What the audit measures and keeps: a re-graded rollout, a sample's fidelity, a step's
audit (the registry keeps it under the step's ``audit`` field), the alarm and its evidence."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Defined in amaris.agents.blocks (the prompts type the blocks that carry them); a step's
# audit carries them, so they are importable with its models.
from amaris.agents.blocks import AlarmEvidence as AlarmEvidence
from amaris.agents.blocks import CriterionDisagreement as CriterionDisagreement
from amaris.agents.blocks import DisagreeingRollout as DisagreeingRollout
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN

OVER_REWARDED_KEPT = 32
"""Most over-rewarded sampled rollouts a step's audit keeps (its registry record stays
small whatever the sample)."""

AlarmKind = Literal["diverging", "gap_jump", "swap_blind", "top_tail"]
"""``diverging``: over the window the training reward rose while the audit reward fell, and
more of the window's rollouts were over-rewarded than the run's history makes likely;
``gap_jump``: over the window the top tail's mean gap between the two rewards reached
``audit.max_gap_jump``, and one criterion was read against the training judge's payment on
more of the sampled top tail than the run's history makes likely;
``swap_blind``: over the window the training judge paid more of the over-rewarded top-tail
rollouts with their final answer swapped for a wrong one like the originals than the
run's history makes likely (it pays for something other than the answer);
``top_tail``: the auditor keeps too little of the training judge's top tail there, less
than the run's history makes likely (docs/fidelity.md, "What an alarm means")."""


class CriterionPair(BaseModel):
    """One criterion's verdict from each judge on one rollout (the judge's scale)."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    training: float
    audit: float
    weight: float = 1.0
    """The criterion's weight (negative: a pitfall, whose high verdict costs reward)."""

    @property
    def pays_more(self) -> bool:
        """The training judge's verdict pays more than the auditor's by at least half the
        scale (a met requirement read unmet, or an absent pitfall read present): the
        direction a judge that turned lenient disagrees in."""
        span = SCALE_MAX - SCALE_MIN
        excess = (self.training - self.audit) if self.weight >= 0 else (self.audit - self.training)
        return excess >= span / 2


class CriterionTally(BaseModel):
    """One criterion over a sample's graded top tail: how many of its rollouts both judges
    gave it a verdict on, and on how many the training judge's verdict paid more
    (:attr:`CriterionPair.pays_more`). What the ``gap_jump`` alarm pools over the window."""

    model_config = ConfigDict(frozen=True)

    id: str
    text: str
    pairs: int = Field(ge=0)
    paid_more: int = Field(ge=0)


class AuditedRollout(BaseModel):
    """One sampled rollout: the reward it was served, and the auditor's."""

    model_config = ConfigDict(frozen=True)

    rollout_id: str
    scope: str
    input: str = ""
    """The prompt, clipped (evidence for the analyzer and updater)."""
    output: str = ""
    """The reply, clipped."""
    output_words: int | None = None
    """Words of the whole reply (the clipped one cannot show its length)."""
    training: float
    """The reward it was served."""
    audit: float | None = None
    """The auditor's reward under the same rubric version; None when it gave no verdict."""
    top_tail: bool = False
    """Drawn from the top tail of the step's training rewards."""
    threshold: float = 1.0
    """The training reward from which a rollout of its scope is in the top tail."""
    criteria: list[CriterionPair] = Field(default_factory=list)
    failure: str | None = None
    """Why the auditor gave no verdict (``judge_timeout: ...``)."""

    @property
    def gap(self) -> float:
        """``|training - audit|`` (0 when not audited)."""
        return abs(self.training - self.audit) if self.audit is not None else 0.0


class Fidelity(BaseModel):
    """How well the training reward agrees with the audit on one sample."""

    model_config = ConfigDict(frozen=True)

    sampled: int = Field(ge=0)
    """Rollouts the auditor graded."""
    failed: int = Field(default=0, ge=0)
    """Sampled rollouts it gave no verdict on (left out of the figures)."""
    agreement: float | None = None
    """Kendall's tau-b between the training and audit rewards; None under two rollouts,
    or when either side gave every rollout the same reward."""
    gap: float | None = None
    """Mean ``|training - audit|`` reward."""
    top_tail_agreement: float | None = None
    """Share of the sampled top tail the auditor also rewards at or above the top tail's
    threshold; None when no top-tail rollout was graded."""
    top_tail_sampled: int = 0
    top_tail_gap: float | None = None
    """Mean ``|training - audit|`` reward of the sampled top tail (where a lenient judge's
    payments land); None when no top-tail rollout was graded."""
    top_tail_kept: int = 0
    """Graded top-tail rollouts the auditor also rewards at or above the threshold."""
    over_rewarded: int = 0
    """Graded rollouts the training judge rewarded above the auditor."""
    tally: list[CriterionTally] = Field(default_factory=list)
    """Per criterion, over the graded top tail (by id, then text)."""
    training_mean: float | None = None
    audit_mean: float | None = None
    criteria: list[CriterionDisagreement] = Field(default_factory=list)
    """Per judged criterion, most disagreed first."""


class Alarm(BaseModel):
    """A Goodhart alarm: the served reward and the audit diverge."""

    model_config = ConfigDict(frozen=True)

    kind: AlarmKind
    reason: str


class RewardGap(BaseModel):
    """A sampled rollout the training judge rewarded above the auditor: the judge canaries
    put it to the training judge again, the audit reward its known answer."""

    model_config = ConfigDict(frozen=True)

    rollout_id: str
    scope: str
    training: float
    audit: float

    @property
    def excess(self) -> float:
        """``training - audit`` (> 0)."""
        return self.training - self.audit


class AuditSummary(BaseModel):
    """A step's audit as ``GET /steps`` lists it."""

    model_config = ConfigDict(frozen=True)

    sampled: int
    agreement: float | None
    top_tail_agreement: float | None
    gap: float | None
    alarm: Alarm | None = None
    swap_checked: int = 0
    """Over-rewarded top-tail rollouts put to the training judge with their final answer
    swapped (``audit.swap_checks``)."""
    swap_blind: int = 0
    """Of them, those it paid within ``judge_canaries.swap_tolerance`` of the original."""


class StepAudit(AuditSummary):
    """A step's audit: the whole step's fidelity, per scope, the alarm and its evidence
    (``GET /steps/{n}``, the step's Prefect artifact)."""

    step: int
    failed: int = 0
    top_tail_gap: float | None = None
    """Mean ``|training - audit|`` reward of the sampled top tail."""
    top_tail_sampled: int = 0
    """Graded top-tail rollouts."""
    top_tail_kept: int = 0
    """Of them, those the auditor also rewards at or above the top tail's threshold."""
    over_rewarded_count: int = 0
    """Graded rollouts the training judge rewarded above the auditor (the alarm's history
    reads it; ``over_rewarded`` keeps at most 32 of them)."""
    tally: list[CriterionTally] = Field(default_factory=list)
    """Per criterion, over the graded top tail: what the ``gap_jump`` alarm pools."""
    training_mean: float | None = None
    audit_mean: float | None = None
    judge_calls: int = 0
    """Auditor calls made (each ``agents.auditor`` request counted in the ledger)."""
    population: int = 0
    """The step's judged rollouts the sample was drawn from (what ``audit.max_share`` and
    ``audit.budget_share`` are shares of)."""
    check_budget: int | None = None
    """The step's part of ``audit.budget_share``: calls its audit, swap checks and judge
    canaries may make together (None: no shared budget)."""
    canary_budget: int | None = None
    """Probes the step's judge canaries may make, what the audit left them."""
    criteria: list[CriterionDisagreement] = Field(default_factory=list)
    scopes: dict[str, Fidelity] = Field(default_factory=dict)
    evidence: dict[str, AlarmEvidence] = Field(default_factory=dict)
    """Per scope, when the alarm fired."""
    over_rewarded: list[RewardGap] = Field(default_factory=list)
    """The sampled rollouts the training judge rewarded above the auditor, most
    over-rewarded first (at most :data:`OVER_REWARDED_KEPT`), alarm or not."""

    def disagreements(self, beyond: float) -> list[RewardGap]:
        """The sampled rollouts the training judge rewarded more than ``beyond`` above the
        auditor, most over-rewarded first."""
        return [r for r in self.over_rewarded if r.excess > beyond]

    def evidence_for(self, scope: str) -> AlarmEvidence | None:
        """What ``scope``'s analyzer and updater are shown: None without an alarm; the
        reason alone for a scope the sample missed."""
        if self.alarm is None:
            return None
        return self.evidence.get(scope) or AlarmEvidence(step=self.step, reason=self.alarm.reason)

    def summary(self) -> AuditSummary:
        """The fields ``GET /steps`` shows."""
        return AuditSummary(
            sampled=self.sampled,
            agreement=self.agreement,
            top_tail_agreement=self.top_tail_agreement,
            gap=self.gap,
            alarm=self.alarm,
            swap_checked=self.swap_checked,
            swap_blind=self.swap_blind,
        )
