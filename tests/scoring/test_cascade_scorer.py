"""The cascade's judge (:class:`CascadeScorer`): the cheap verdict's confidence from k samples,
a doubt that cannot move the reward not escalated, a confident rollout probed (judged by
both, answered by the scorer, paired), a cheap judge without a verdict escalated. The real
gateway with two scripted providers in process (tests/support/scripted_llm.py), Qdrant in
memory; no conftest fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway
from amaris.models import ScoreRequest
from amaris.rubric.model import Criterion
from amaris.rubric.store import RubricStore
from amaris.scoring.calibration import Calibration, Pair, stratum
from amaris.scoring.cascade import CascadeScorer
from amaris.settings import load_settings
from tests.support.scripted_llm import ScriptedProvider, answer, scorer_prompt, verdicts

A1 = Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True)
R1 = Criterion(id="R1", text="The reply hedges between answers.", weight=-1.0, is_anchor=False)


def request(rid: str = "r1") -> ScoreRequest:
    body = {"id": rid, "input": "What is 2 + 2?", "output": f"2 + 2 = 4 ({rid})."}
    return ScoreRequest.model_validate({"rollout": body, "metadata": {"current_step": 1}})


@pytest.fixture
async def make(tmp_path: Path) -> AsyncIterator[Any]:
    """Builds a cascade over two scripted providers (3 cheap samples a rollout)."""
    opened: list[tuple[LLMGateway, QdrantClient]] = []

    def build(
        cheap: ScriptedProvider, strong: ScriptedProvider, pairs: list[Pair], **overrides: Any
    ) -> CascadeScorer:
        """``pairs``: the calibration's to start with."""
        settings = load_settings(
            None,
            **{
                "memory.path": str(tmp_path),
                "agents.cheap_scorer.samples": 3,
                "agents.cheap_scorer.temperature": 1.0,
                "scoring.cascade.min_pairs": 1,
                "scoring.cascade.probe_share": 0.0,
                **overrides,
            },
        )
        qdrant = QdrantClient(":memory:")
        store = RubricStore(qdrant, "rubrics", None)
        store.publish(anchors=(A1,), adaptive=(R1,), origin="config", step=None, next_adaptive_id=2)
        providers = {"scorer": strong, "cheap_scorer": cheap}
        llm = LLMGateway(settings, providers, CallLog(None))
        opened.append((llm, qdrant))
        calibration = Calibration(settings.scoring.cascade)
        calibration.add(pairs)
        prompt = scorer_prompt(settings)
        return CascadeScorer(settings, llm, store, prompt, calibration=calibration)

    yield build
    for llm, qdrant in opened:
        await llm.close()
        qdrant.close()


# Sure pairs agree, doubtful ones do not: the threshold is 0.9.
CALIBRATED = [Pair(0.9, 1.0, 1.0)] * 30 + [Pair(0.6, 1.0, 0.0)] * 30


async def test_the_cheap_confidence_is_its_least_agreeing_criterion(make: Any) -> None:
    cheap = ScriptedProvider(
        script=[verdicts(("A1", 4), ("R1", 0)), verdicts(("A1", 4), ("R1", 1))],
        default=verdicts(("A1", 4), ("R1", 0)),
    )
    strong = ScriptedProvider(default=verdicts(("A1", 4), ("R1", 0)))
    scorer = make(cheap, strong, CALIBRATED)
    assert scorer.calibration.threshold == 0.9
    judgement = await scorer.judge(request())
    # A1: 3 of 3 samples agree; R1: 2 of 3 (0, 1, 0 round to two values): the rollout's
    # confidence is R1's. Under 0.9: escalated, answered by the scorer, the pair kept.
    assert (judgement.judge, len(cheap.calls), len(strong.calls)) == ("strong", 3, 1)
    pair = scorer.calibration.pairs[-1]
    assert (pair.confidence, pair.cheap) == (pytest.approx(2 / 3), pytest.approx(11 / 12))
    assert pair.strong == 1.0
    assert pair.weight == 1.0 and scorer.counters["cascade.escalated"] == 1
    # Unanimous samples: sure enough, the cheap judge decides alone.
    decided = await scorer.judge(request("r2"))
    assert (decided.judge, decided.confidence) == ("cheap", {"A1": 1.0, "R1": 1.0})
    assert (len(cheap.calls), len(strong.calls)) == (6, 1)
    assert scorer.counters["cascade.cheap"] == 1 and scorer.counters["scored"] == 2


async def test_a_doubtful_verdict_that_cannot_move_the_reward_is_not_escalated(
    make: Any,
) -> None:
    # The answer is wrong for sure (A1: 0 in 3 of 3 samples): the reward is 0 whether the
    # reply also hedges (R1: 0, 1, 0, agreement 2/3) or not, so R1's doubt does not count.
    cheap = ScriptedProvider(
        script=[verdicts(("A1", 0), ("R1", 0)), verdicts(("A1", 0), ("R1", 1))],
        default=verdicts(("A1", 0), ("R1", 0)),
    )
    strong = ScriptedProvider(default=verdicts(("A1", 0), ("R1", 0)))
    scorer = make(cheap, strong, CALIBRATED)
    judgement = await scorer.judge(request())
    assert judgement.confidence["R1"] == pytest.approx(2 / 3)  # under the threshold, 0.9
    assert (judgement.judge, len(cheap.calls), len(strong.calls)) == ("cheap", 3, 0)
    assert scorer.counters["cascade.cheap"] == 1 and scorer.counters["cascade.escalated"] == 0


async def test_a_confident_rollout_probed_is_answered_by_the_scorer(make: Any) -> None:
    sure = verdicts(("A1", 4), ("R1", 0))
    cheap, strong = ScriptedProvider(default=sure), ScriptedProvider(default=sure)
    trusting = [Pair(0.0, 1.0, 1.0)] * 30  # every cheap verdict sure enough
    scorer = make(cheap, strong, trusting, **{"scoring.cascade.probe_share": 0.5})
    assert scorer.calibration.threshold == 0.0
    judged = [await scorer.judge(request(f"r{i}")) for i in range(40)]
    probed = scorer.counters["cascade.probed"]
    assert 5 < probed < 35  # about half, drawn per rollout
    assert sum(j.judge == "strong" for j in judged) == probed == len(strong.calls)
    assert [p.weight for p in scorer.calibration.pairs[30:]] == [2.0] * probed  # 1 / share
    # The same rollout draws the same: probed again, or not.
    again = await scorer.judge(request("r0"))
    assert again.judge == judged[0].judge


async def test_every_judged_rollout_is_counted_in_its_stratum(make: Any) -> None:
    # The calibration sizes its strata from the rollouts judged, paired or not.
    cheap = ScriptedProvider(
        script=[verdicts(("A1", 4), ("R1", 0)), verdicts(("A1", 4), ("R1", 1))],
        default=verdicts(("A1", 4), ("R1", 0)),
    )
    strong = ScriptedProvider(default=verdicts(("A1", 4), ("R1", 0)))
    scorer = make(cheap, strong, CALIBRATED)
    assert scorer.calibration.population() == {}
    assert (await scorer.judge(request())).judge == "strong"  # 2/3: paired
    for rid in ("r2", "r3"):
        assert (await scorer.judge(request(rid))).judge == "cheap"  # sure: not paired
    assert len(scorer.calibration.pairs) == len(CALIBRATED) + 1
    assert scorer.calibration.population() == {stratum(2 / 3): 1.0, stratum(1.0): 2.0}


async def test_a_cheap_judge_without_a_verdict_is_escalated(make: Any) -> None:
    cheap = ScriptedProvider(default=answer("no verdict here"))
    strong = ScriptedProvider(default=verdicts(("A1", 4), ("R1", 0)))
    scorer = make(cheap, strong, CALIBRATED, **{"gateway.reask_on_invalid": False})
    judgement = await scorer.judge(request())
    assert (judgement.judge, judgement.failure) == ("strong", None)
    assert scorer.counters["cascade.cheap_unscored"] == 1
    assert scorer.counters["cascade.escalated"] == 1
    assert scorer.counters["unscored"] == 0  # the rollout was scored, by the scorer
    assert len(scorer.calibration.pairs) == len(CALIBRATED)  # nothing to pair
