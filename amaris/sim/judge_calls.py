"""How many rollouts of a run needed no judge call: rule criteria and the pre-check.

Read from the run's rollout log (``rollouts.jsonl``): a scored rollout with no verdict of
kind ``judge`` was rewarded without asking the judge (every criterion a rule, or a
degenerate reply given the pre-check's floor). ``metrics.json`` carries the result as
``judge_calls``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from amaris.memory.records import RolloutRecord


class JudgeCalls(TypedDict):
    """What :func:`judge_calls` counts (JSON in a simulation's manifest)."""

    scored: int
    judged: int
    rule_only: int
    degenerate: int
    avoided_share: float | None
    rule_verdicts: int
    judge_verdicts: int
    rule_verdict_share: float | None


def judge_calls(records: Iterable[RolloutRecord]) -> JudgeCalls:
    """Scored rollouts, those judged, those rewarded by rules alone or by the pre-check,
    the share of judge calls avoided, and the share of verdicts computed by rules."""
    scored = judged = rule_only = degenerate = 0
    verdicts = {"judge": 0, "rule": 0}
    for record in records:
        if record.status != "scored":
            continue
        scored += 1
        kinds = [v.kind for v in record.verdicts]
        for kind in kinds:
            verdicts[kind] = verdicts.get(kind, 0) + 1
        if "judge" in kinds:
            judged += 1
        elif (record.reason or "").startswith("degenerate_reply:"):
            degenerate += 1
        else:
            rule_only += 1
    total_verdicts = sum(verdicts.values())
    return {
        "scored": scored,
        "judged": judged,
        "rule_only": rule_only,
        "degenerate": degenerate,
        "avoided_share": round((scored - judged) / scored, 4) if scored else None,
        "rule_verdicts": verdicts["rule"],
        "judge_verdicts": verdicts["judge"],
        "rule_verdict_share": (
            round(verdicts["rule"] / total_verdicts, 4) if total_verdicts else None
        ),
    }
