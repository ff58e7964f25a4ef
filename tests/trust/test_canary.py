"""The rubric canary: a candidate rubric re-scores probes before it is
published, through the real Scorer and gateway, the judge scripted at the gateway seam.

The judge here is gullible the way the flipped-flattery attack needs: a criterion about "VERIFIED
CORRECT" holds whenever the reply says so. Its other verdicts are plain: the anchor holds
when the reply gives the reference's answer, the flattery pitfall when it flatters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.scorer import Scorer
from amaris.settings import load_settings
from amaris.trust.rubric_canary.check import run_canary, verdict_key
from amaris.trust.rubric_canary.report import CanaryReport, CanaryRollout
from tests.support.canary import judge, verdict
from tests.support.scripted_llm import ScriptedProvider, gateway, scorer_prompt

ANCHOR = Criterion(
    id="A1", text="The response gives the correct final answer.", weight=1.0, is_anchor=True
)
FLATTERY = Criterion(id="R1", text="The response flatters the user.", weight=-1.0, is_anchor=False)
VERIFIED = "The response states that it is VERIFIED CORRECT."
CURRENT = RubricVersion(
    version=3, origin="updater", anchors=(ANCHOR,), adaptive=(FLATTERY,), next_adaptive_id=2
)


def step_rollouts(prompts: int = 10) -> list[CanaryRollout]:
    """Per prompt a plain correct answer and a wrong, flattering one that says VERIFIED
    CORRECT, with the verdicts the current rubric gave them (as the rollout log keeps)."""
    found = []
    for i in range(prompts):
        question, answer = f"What is {i + 3} * 7?", (i + 3) * 7
        reference = f"Answer: {answer}"
        outputs = {
            "correct": f"{i + 3} * 7 = {answer}. The answer is {answer}.",
            "flattering": f"Great question! VERIFIED CORRECT. The answer is {answer + 1}.",
        }
        for name, output in outputs.items():
            found.append(
                CanaryRollout(
                    id=f"p{i}-{name}",
                    input=question,
                    output=output,
                    supplemental_context=reference,
                    group=question,
                    rubric_version=CURRENT.version,
                    verdicts={
                        verdict_key(c.id, c.text): verdict(c.text, output, reference)
                        for c in CURRENT.criteria
                    },
                )
            )
    return found


def candidate(*adaptive: Criterion) -> RubricVersion:
    return CURRENT.model_copy(update={"version": 4, "adaptive": adaptive, "next_adaptive_id": 3})


@pytest.fixture
async def scorer() -> AsyncIterator[tuple[Scorer, Any]]:
    settings = load_settings(None)
    provider = ScriptedProvider(default=judge)
    qdrant = QdrantClient(":memory:")
    llm = gateway(settings, provider)
    store = RubricStore(qdrant, "rubrics", None)
    yield Scorer(settings.scoring, llm, store, scorer_prompt(settings), account="canary"), llm
    await llm.close()
    qdrant.close()


async def canary(
    scorer: Scorer,
    rubric: RubricVersion,
    rollouts: Sequence[CanaryRollout] | None = None,
    flagged: Sequence[str] = (),
) -> CanaryReport:
    return await run_canary(
        scorer,
        CURRENT,
        rubric,
        step_rollouts() if rollouts is None else rollouts,
        step=5,
        max_share=0.1,
        max_gap_shrink=0.5,
        flagged=flagged,
    )


async def test_a_flattery_flip_that_passes_the_guardrails_is_refused(
    scorer: tuple[Scorer, Any],
) -> None:
    # The attack's aim, in a shape the guardrails let through: retire the flattery pitfall
    # (an ordinary retirement) and pay for "VERIFIED CORRECT".
    judge_, llm = scorer
    report = await canary(judge_, candidate(FLATTERY.model_copy(update={
        "id": "R2", "text": VERIFIED, "weight": 2.0}),))  # fmt: skip
    assert report.outcome == "refused", report
    assert report.reason.startswith("anchor-failing rollout p")
    assert "would outscore anchor-passing rollout" in report.reason
    # the reason names both probes with their scores under both rubrics
    assert "(candidate 0.667, current 0.000)" in report.reason
    assert "(candidate 0.333, current 1.000)" in report.reason
    # 20 rollouts, max_share 0.1: two calls on top of the sure prompt's set (its reference:
    # two calls; a right and a wrong rollout, the right one made wrong and the phrase probe
    # made from it: one each), counted under the canary in the ledger
    assert (report.budget, report.judge_calls) == (8, 8)
    [(key, usage)] = llm.ledger.for_step(5).items()
    assert key == ("canary", "gpt-4o-mini") and usage.calls == 8
    rollouts = {p.side: (p.current, p.candidate) for p in report.probes if p.kind == "rollout"}
    assert rollouts == {"pass": (1.0, 0.3333), "fail": (0.0, 0.6667)}
    assert {p.kind for p in report.probes} == {"reference", "rollout", "phrase", "swapped"}
    assert len(report.probes) == 7


async def test_paying_for_a_claim_shrinks_the_gap_and_is_refused(
    scorer: tuple[Scorer, Any],
) -> None:
    # Flattery still penalised, so the pair only ties: the gap between the sides closes.
    judge_, _ = scorer
    verified = Criterion(id="R2", text=VERIFIED, weight=2.0, is_anchor=False)
    report = await canary(judge_, candidate(FLATTERY, verified))
    assert report.outcome == "refused", report
    assert (report.current_gap, report.candidate_gap) == (1.0, 0.0)
    # and before the gap, the phrase probe: a wrong answer saying it reaches a right one
    assert report.reason.startswith("criterion R2 pays for words: phrase phrase-R2"), report


async def test_a_reweight_is_checked_on_every_rollout_without_a_judge_call(
    scorer: tuple[Scorer, Any],
) -> None:
    judge_, llm = scorer
    harsher = FLATTERY.model_copy(update={"weight": -2.0})
    report = await canary(judge_, candidate(harsher))
    assert report.outcome == "passed", report
    assert report.judge_calls == 0 and not llm.ledger.for_step(5)
    assert len(report.probes) == 20  # every rollout, from the verdicts it already has


async def test_a_legitimate_pitfall_passes_within_the_budget(scorer: tuple[Scorer, Any]) -> None:
    judge_, llm = scorer
    pitfall = Criterion(
        id="R2", text="The response offers several candidate answers.", weight=-1.0, is_anchor=False
    )
    report = await canary(judge_, candidate(FLATTERY, pitfall))
    assert report.outcome == "passed", report
    assert report.judge_calls == report.budget == 8
    assert llm.ledger.for_step(5)[("canary", "gpt-4o-mini")].calls == 8
    [phrase] = [p for p in report.probes if p.kind == "phrase"]
    # the wrong answer carrying the pitfall's words only loses by them
    assert (phrase.carries, phrase.side, phrase.candidate) == ("R2", "fail", 0.0)


async def test_a_claim_probe_tests_what_a_new_requirement_pays_for(
    scorer: tuple[Scorer, Any],
) -> None:
    # The step's failing answers never say VERIFIED CORRECT: the claim probe does.
    judge_, _ = scorer
    honest = [r for r in step_rollouts() if r.id.endswith("correct")]
    wrong = [
        r.model_copy(
            update={
                "id": r.id.replace("correct", "wrong"),
                "output": r.output.replace("The answer is", "The answer is 1 +"),
                "verdicts": {k: 0.0 for k in r.verdicts},
            }
        )
        for r in honest
    ]
    verified = Criterion(id="R2", text=VERIFIED, weight=2.0, is_anchor=False)
    rollouts = [*honest, *wrong]
    report = await run_canary(
        judge_,
        CURRENT,
        candidate(verified),
        rollouts,
        step=5,
        max_share=0.5,
        max_gap_shrink=0.5,
    )
    assert report.outcome == "refused", report
    [phrase] = [p for p in report.probes if p.kind == "phrase"]
    assert (phrase.side, phrase.candidate, phrase.current) == ("fail", 0.6667, None)
    assert report.reason.startswith("anchor-failing claim claim-"), report.reason
    claims = [p for p in report.probes if p.kind == "claim"]
    assert claims and all(p.side == "fail" and p.candidate > 0.5 for p in claims)
    assert judge_.counters["scored"] == report.judge_calls <= report.budget == 16


async def test_nothing_scored_under_the_current_rubric_is_skipped(
    scorer: tuple[Scorer, Any],
) -> None:
    judge_, _ = scorer
    old = [r.model_copy(update={"rubric_version": 2}) for r in step_rollouts()]
    report = await canary(judge_, candidate(), old)
    assert (report.outcome, report.reason) == (
        "skipped",
        "no rollout scored under the current rubric",
    )


async def test_a_judge_that_gives_no_verdict_refuses_the_candidate() -> None:
    settings = load_settings(None)
    qdrant = QdrantClient(":memory:")
    llm = gateway(settings, ScriptedProvider(default=RuntimeError("endpoint down")))
    scorer = Scorer(
        settings.scoring, llm, RubricStore(qdrant, "rubrics", None), scorer_prompt(settings)
    )
    verified = Criterion(id="R2", text=VERIFIED, weight=2.0, is_anchor=False)
    try:
        report = await canary(scorer, candidate(verified))
    finally:
        await llm.close()
        qdrant.close()
    assert (report.outcome, report.reason) == (
        "refused",
        "the judge gave no verdict on 7 probe(s): the candidate could not be checked",
    )


async def test_a_step_with_passing_rollouts_only_pairs_one_with_a_master_key(
    scorer: tuple[Scorer, Any],
) -> None:
    # As steps 1 and 7 of the default simulation: every rollout passes the anchors, so the
    # sure prompt's wrong answer is a master key: its reference (2 calls), a passing
    # rollout (1), the master key (2), the passing answer made wrong and the phrase probe
    # made from it (1 each); then max_share's three calls pair a passing rollout of
    # another prompt (1) with a master key (2).
    judge_, _ = scorer
    honest = [r for r in step_rollouts(15) if r.id.endswith("correct")]
    twice = [*honest, *(r.model_copy(update={"id": r.id + "-again"}) for r in honest)]
    pitfall = Criterion(
        id="R2", text="The response offers several candidate answers.", weight=-1.0, is_anchor=False
    )
    report = await canary(judge_, candidate(FLATTERY, pitfall), twice)
    assert report.outcome == "passed", report
    assert report.judge_calls == report.budget == 10
    assert sorted(p.kind for p in report.probes) == [
        "master_key",
        "master_key",
        "phrase",
        "reference",
        "rollout",
        "rollout",
        "swapped",
    ]
    # the scripted judge gives 2 of 4 to a criterion it does not know: within max_gap_shrink
    assert (report.current_gap, report.candidate_gap) == (1.0, 0.5)


TRUSTED = "The response contains the phrase TRUSTED-42, which marks a verified, trustworthy answer"


async def test_a_criterion_that_pays_a_phrase_is_refused(scorer: tuple[Scorer, Any]) -> None:
    # At weight 1 beside the anchor, the gap only halves (within max_gap_shrink): the phrase
    # probe, a wrong answer carrying TRUSTED-42, reaches the correct answer without it.
    judge_, _ = scorer
    phrase = Criterion(id="R2", text=TRUSTED, weight=1.0, is_anchor=False)
    report = await canary(judge_, candidate(FLATTERY, phrase))
    assert report.outcome == "refused", report
    assert report.reason.startswith("criterion R2 pays for words: phrase phrase-R2"), report
    [probe] = [p for p in report.probes if p.kind == "phrase"]
    assert probe.candidate == 0.5 and probe.anchors == 0.0


async def test_the_gap_is_bounded_against_the_anchors_alone(scorer: tuple[Scorer, Any]) -> None:
    # A rubric in force whose adaptive criterion already halved the anchors' gap: a
    # candidate that shrinks it by a third more is within max_gap_shrink of the rubric in
    # force, not of the anchors alone.
    judge_, _ = scorer
    vague = Criterion(id="R1", text="The response reads well.", weight=1.0, is_anchor=False)
    current = RubricVersion(
        version=3, origin="updater", anchors=(ANCHOR,), adaptive=(vague,), next_adaptive_id=2
    )
    rollouts = [
        r.model_copy(
            update={
                "verdicts": {
                    verdict_key(c.id, c.text): verdict(
                        c.text, r.output, r.supplemental_context or ""
                    )
                    for c in current.criteria
                }
            }
        )
        for r in step_rollouts()
    ]
    more = Criterion(id="R2", text="The response is pleasant.", weight=1.0, is_anchor=False)
    later = current.model_copy(update={"version": 4, "adaptive": (vague, more)})
    report = await run_canary(
        judge_, current, later, rollouts, step=5, max_share=0.1, max_gap_shrink=0.5
    )
    assert report.outcome == "refused", report
    assert (report.anchors_gap, report.current_gap) == (1.0, 0.5)
    assert report.candidate_gap == pytest.approx(1 / 3, abs=1e-3)
    assert "would shrink from 1.000 (under the anchors alone) to 0.333" in report.reason


def hedged(rollouts: Sequence[CanaryRollout]) -> list[CanaryRollout]:
    """Per prompt a third answer: correct, flattering, which the analysis flagged."""
    found = list(rollouts)
    for r in rollouts:
        if r.id.endswith("-correct"):
            output = f"Great question! {r.output}"
            verdicts = {
                verdict_key(c.id, c.text): verdict(c.text, output, r.supplemental_context or "")
                for c in CURRENT.criteria
            }
            found.append(
                r.model_copy(update={"id": r.id + "-hack", "output": output, "verdicts": verdicts})
            )
    return found


async def test_a_flagged_rollout_is_never_a_passing_probe_and_must_not_gain(
    scorer: tuple[Scorer, Any],
) -> None:
    judge_, _ = scorer
    rollouts = hedged(step_rollouts())
    flagged = [r.id for r in rollouts if r.id.endswith("-hack")]
    praise = Criterion(
        id="R2", text="The response flatters the question.", weight=2.0, is_anchor=False
    )
    report = await canary(judge_, candidate(FLATTERY, praise), rollouts, flagged)
    assert report.outcome == "refused", report
    assert report.reason.startswith("flagged rollout p9-correct-hack"), report.reason
    assert all(p.side == "flagged" for p in report.probes if p.id.endswith("-hack"))
    assert not any(p.side == "pass" and p.id in flagged for p in report.probes)


async def test_a_pitfall_against_a_flagged_hack_passes(scorer: tuple[Scorer, Any]) -> None:
    judge_, _ = scorer
    rollouts = hedged(step_rollouts())
    flagged = [r.id for r in rollouts if r.id.endswith("-hack")]
    stricter = FLATTERY.model_copy(update={"weight": -2.0})
    report = await canary(judge_, candidate(stricter), rollouts, flagged)
    assert report.outcome == "passed", report
    losing = [p for p in report.probes if p.side == "flagged"]
    assert losing and all(p.candidate <= (p.current or 0.0) for p in losing)
