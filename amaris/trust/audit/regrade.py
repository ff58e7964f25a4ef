"""The audit judge's work on a sample: each sampled rollout re-graded against the rubric
version that scored it, with the scorer's own prompt, schema and judge-call code
(:class:`~amaris.scoring.scorer.Scorer` on the ``auditor`` agent's endpoint)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import ValidationError

from amaris.memory.records import RolloutRecord
from amaris.models import ScoreRequest
from amaris.rubric.aggregate import aggregate
from amaris.rubric.model import RubricVersion
from amaris.trust.audit.models import AuditedRollout, CriterionPair
from amaris.trust.audit.sampling import Drawn
from amaris.trust.judging import Judge, JudgeRefusedError

EVIDENCE_TEXT_CHARS = 2_000
"""Characters kept of a sampled rollout's prompt and reply (evidence, not the grading)."""


def _request(record: RolloutRecord) -> ScoreRequest:
    rollout = record.rollout
    return ScoreRequest.model_validate(
        {
            "rollout": {
                "id": rollout.id,
                "input": rollout.input,
                "output": rollout.output,
                "supplemental_context": rollout.supplemental_context,
            },
            "metadata": {"current_step": record.step},
        }
    )


async def regrade(
    scorer: Judge, drawn: Drawn[RolloutRecord], rubric: RubricVersion
) -> AuditedRollout:
    """One sampled rollout re-graded by the auditor under ``rubric``; a rollout it gives
    no verdict on has ``audit`` None and the ``failure`` (never a made-up reward)."""
    record = drawn.item
    base = AuditedRollout(
        rollout_id=record.rollout.id,
        scope=record.scope,
        input=record.rollout.input[:EVIDENCE_TEXT_CHARS],
        output=record.rollout.output[:EVIDENCE_TEXT_CHARS],
        output_words=len(record.rollout.output.split()),
        training=float(record.score or 0.0),
        top_tail=drawn.top_tail,
        threshold=drawn.threshold,
    )
    # A record the configuration now refuses (a limit lowered since) is not graded.
    try:
        judgement = await scorer.judge(_request(record), rubric)
    except (ValidationError, JudgeRefusedError) as exc:
        return base.model_copy(update={"failure": f"{type(exc).__name__}: {exc}"[:500]})
    if judgement.breakdown is None:
        return base.model_copy(update={"failure": judgement.failure})
    verdicts = judgement.breakdown
    reward = aggregate([c.weight for c in verdicts], [c.verdict for c in verdicts])
    served = {(v.id, v.text): float(v.verdict) for v in record.verdicts if v.kind == "judge"}
    pairs = [
        CriterionPair(
            id=c.id,
            text=c.text,
            training=served[(c.id, c.text)],
            audit=c.verdict,
            weight=c.weight,
        )
        for c in verdicts
        if c.kind == "judge" and (c.id, c.text) in served
    ]
    return base.model_copy(update={"audit": reward, "criteria": pairs})


async def regrade_all(
    scorer: Judge, sample: Sequence[Drawn[RolloutRecord]], rubrics: Sequence[RubricVersion]
) -> list[AuditedRollout]:
    """Every sampled rollout re-graded, concurrently (the gateway's ``concurrency.auditor``
    and endpoint limits bound the calls); ``rubrics[i]`` is ``sample[i]``'s."""
    return list(
        await asyncio.gather(*(regrade(scorer, d, r) for d, r in zip(sample, rubrics, strict=True)))
    )
