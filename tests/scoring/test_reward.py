"""The reward path (:func:`score_rollout`, :func:`reward_of`, :func:`log_record`) from a
checked request to the answer and the rollout log's record.

Real parts: the step coordinator, the rollout log and the rubric store on Qdrant in memory,
the scorer and the gateway over a scripted provider in process (tests/support/scripted_llm.py); the
step's flow is a function that publishes the next rubric. No conftest fixture:
``python -m bench.evaluations.mutation reward`` runs these with ``--noconftest``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import StepRegistry
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog
from amaris.models import ScoreRequest, ScoreResponse
from amaris.request_context import request_id_var
from amaris.rubric.model import Criterion
from amaris.rubric.scopes import ScopeResolver, input_id
from amaris.rubric.store import RubricStore
from amaris.scoring.refusals import OverloadedError, OversizeError
from amaris.scoring.reward import log_record, reward_of, score_rollout
from amaris.scoring.rollout_ids import RolloutConflictError, RolloutIds
from amaris.scoring.scorer import Scorer
from amaris.settings import Settings, load_settings
from amaris.steps.coordinator import StepCoordinator, StepRefusedError
from amaris.steps.outcomes import StepRun
from tests.support.scripted_llm import ScriptedProvider, gateway, scorer_prompt, verdicts
from tests.support.step_runs import scope_outcome

RUBRIC: dict[str, Any] = {
    "anchor_rubrics": [{"text": "The response gives the correct final answer.", "weight": 1.0}],
    "adaptive_rubrics": [{"text": "The response hedges between answers.", "weight": -1.0}],
}
"""A1 (weight 1) and R1 (a pitfall, weight -1): A1 at 3, R1 at 0 give 0.75."""
DEADLINE_S = 60.0
"""Generous bound of a step's wait (never part of an assertion)."""


def request(
    rid: str = "r1",
    output: str = "2 + 2 = 4. The answer is 4.",
    step: int = 0,
    breakdown: bool = False,
    **rollout: Any,
) -> ScoreRequest:
    return ScoreRequest.model_validate(
        {
            "rollout": {"id": rid, "input": "What is 2 + 2?", "output": output, **rollout},
            "metadata": {"current_step": step, "high_level_goal": "math"},
            "include_breakdown": breakdown,
        }
    )


class Service:
    """The hot path's parts, as the app wires them."""

    def __init__(self, settings: Settings, qdrant: QdrantClient) -> None:
        self.settings = settings
        self.provider = ScriptedProvider(default=verdicts(("A1", 3), ("R1", 0)))
        self.gateway = gateway(settings, self.provider)
        self.store = RubricStore(qdrant, "t", None)
        self.store.ensure_initialized(settings)
        self.scopes = ScopeResolver(settings, self.store)
        self.scorer = Scorer(settings.scoring, self.gateway, self.store, scorer_prompt(settings))
        self.log = SqliteRolloutLog(":memory:", "t")  # the embedded default
        self.steps_run: list[int] = []
        self.next_rubric = True
        """Whether the step's flow publishes a new global rubric (one more adaptive)."""
        self.coordinator = StepCoordinator(settings, self.log, StepRegistry(qdrant, "t"), self)
        self.ids = RolloutIds(self.log)

    def run(self, step: int, new_attempt: bool) -> concurrent.futures.Future[StepRun]:
        """The coordinator's launcher: the step's flow, done at once."""
        self.steps_run.append(step)
        if self.next_rubric:
            current = self.store.current()
            extra = Criterion(id="R2", text="Shows its work.", weight=1.0, is_anchor=False)
            self.store.publish(
                anchors=current.anchors,
                adaptive=(*current.adaptive, extra),
                origin="updater",
                step=step,
                next_adaptive_id=3,
            )
        done: concurrent.futures.Future[StepRun] = concurrent.futures.Future()
        outcome = "published" if self.next_rubric else "unchanged"
        done.set_result(StepRun(step=step, scopes={"global": scope_outcome(outcome)}))
        return done

    async def score(self, req: ScoreRequest, sync: bool = False) -> Any:
        return await score_rollout(
            req,
            scopes=self.scopes,
            scorer=self.scorer,
            coordinator=self.coordinator,
            ids=self.ids,
            sync=sync,
        )

    def logged(self, step: int = 0) -> list[RolloutRecord]:
        return self.log.load_step(step)


@pytest.fixture
async def make() -> AsyncIterator[Any]:
    built: list[tuple[Service, QdrantClient]] = []

    def build(**overrides: Any) -> Service:
        settings = load_settings(None, **{**RUBRIC, **overrides})
        qdrant = QdrantClient(":memory:")
        service = Service(settings, qdrant)
        built.append((service, qdrant))
        return service

    yield build
    for service, qdrant in built:
        await service.coordinator.close()
        await service.gateway.close()
        qdrant.close()


async def test_a_scored_rollout_is_answered_and_logged_with_its_verdicts(make: Any) -> None:
    s = make()
    token = request_id_var.set("req-7")
    try:
        answer = await s.score(request())
    finally:
        request_id_var.reset(token)
    assert answer.status == "scored" and answer.score == pytest.approx(0.75)
    assert answer.rubric_version == 1 and answer.rollout_id == "r1"
    assert answer.reason is None and answer.truncated == [] and not answer.cached
    assert answer.breakdown is None  # not asked for
    (record,) = s.logged()
    assert record.scope == "global" and record.step == 0
    assert record.score == pytest.approx(0.75) and record.status == "scored"
    assert record.reason is None and record.rubric_version == 1
    assert record.request_id == "req-7"
    assert record.rollout.output == "2 + 2 = 4. The answer is 4."
    assert record.metadata["high_level_goal"] == "math"
    # the log keeps the verdicts even when the answer leaves them out
    assert [(v.id, v.verdict) for v in record.verdicts] == [("A1", 3), ("R1", 0)]


async def test_the_breakdown_is_in_the_answer_when_asked_for(make: Any) -> None:
    s = make()
    answer = await s.score(request(breakdown=True))
    assert answer.breakdown is not None
    assert [(c.id, c.verdict, c.weight) for c in answer.breakdown] == [
        ("A1", 3, 1.0),
        ("R1", 0, -1.0),
    ]


@pytest.mark.parametrize("policy", ["null", "error"])
async def test_an_unjudged_rollout_is_unscored_never_given_a_score(make: Any, policy: str) -> None:
    # a neutral_score set is used by on_failure: neutral only
    s = make(**{"scoring.on_failure": policy, "scoring.neutral_score": 0.5})
    s.provider.default = RuntimeError("connection refused")
    answer = await s.score(request(breakdown=True))
    assert answer.status == "unscored" and answer.score is None
    assert answer.reason == "judge_unavailable: scorer: connection refused"
    assert answer.rubric_version == 1 and answer.rollout_id == "r1" and answer.breakdown is None
    (record,) = s.logged()
    assert record.status == "unscored" and record.score is None
    assert record.reason == answer.reason and record.verdicts == []


async def test_on_failure_neutral_answers_the_neutral_score_but_logs_none(make: Any) -> None:
    s = make(**{"scoring.on_failure": "neutral", "scoring.neutral_score": 0.5})
    s.provider.default = RuntimeError("connection refused")
    answer = await s.score(request())
    assert answer.status == "unscored" and answer.score == 0.5
    (record,) = s.logged()
    assert record.status == "unscored" and record.score is None


async def test_a_degenerate_reply_gets_the_floor_unjudged(make: Any) -> None:
    s = make(**{"scoring.precheck.floor": 0.1})
    answer = await s.score(request(output="...", breakdown=True))
    assert answer.status == "scored" and answer.score == 0.1
    assert answer.reason is not None and answer.reason.startswith("degenerate_reply: ")
    assert answer.breakdown == [] and answer.rubric_version == 1 and answer.rollout_id == "r1"
    assert s.provider.calls == [] and s.scorer.counters["degenerate"] == 1
    (record,) = s.logged()
    assert record.score == 0.1 and record.verdicts == []
    # reward_of on its own: the global rubric's version unless given one
    newer = s.store.publish(
        anchors=s.store.current().anchors,
        adaptive=(),
        origin="updater",
        step=0,
        next_adaptive_id=2,
    )
    alone = await reward_of(s.scorer, request(output="..."))
    assert alone.rubric_version == newer.version == 2
    older = s.store.get(1)
    assert (await reward_of(s.scorer, request(output="..."), older)).rubric_version == 1


async def test_without_the_precheck_a_degenerate_reply_is_judged(make: Any) -> None:
    s = make(**{"scoring.precheck.enabled": False})
    answer = await s.score(request(output="..."))
    assert answer.score == pytest.approx(0.75) and len(s.provider.calls) == 1
    assert s.scorer.counters["degenerate"] == 0


async def test_a_cut_field_and_a_cached_verdict_are_said_in_the_answer(make: Any) -> None:
    s = make(**{"scoring.max_field_chars": 30, "scoring.oversize": "truncate"})
    long = "The answer is 4. " * 3
    first = await s.score(request(output=long))
    again = await s.score(request(rid="r2", output=long))
    assert first.truncated == again.truncated == ["rollout.output"]
    assert not first.cached and again.cached and again.score == first.score
    assert [r.rollout.id for r in s.logged()] == ["r1", "r2"]


async def test_an_oversize_field_is_refused_before_anything_is_judged_or_logged(
    make: Any,
) -> None:
    s = make(**{"scoring.max_field_chars": 10})
    with pytest.raises(OversizeError):
        await s.score(request())
    assert s.provider.calls == [] and s.logged() == [] and s.coordinator.status(0) is None


async def test_a_refused_step_is_refused_before_anything_is_judged_or_logged(
    make: Any,
) -> None:
    s = make(**{"pipeline.max_step": 5})
    with pytest.raises(StepRefusedError):
        await s.score(request(step=6))
    assert s.provider.calls == [] and s.logged(6) == []


async def test_a_rollout_id_with_other_content_is_a_conflict_but_a_retry_is_not(
    make: Any,
) -> None:
    s = make()
    await s.score(request())
    retry = await s.score(request())  # identical: accepted, answered from the cache
    assert retry.cached
    with pytest.raises(RolloutConflictError):
        await s.score(request(output="5"))
    assert len(s.logged()) == 2 and len(s.provider.calls) == 1


async def test_a_rollout_that_failed_before_the_log_leaves_its_id_free(make: Any) -> None:
    s = make(**{"scoring.max_pending": 1})
    s.provider.hold = asyncio.Event()
    held = asyncio.create_task(s.score(request(rid="held")))
    await s.provider.arrived.wait()
    with pytest.raises(OverloadedError):
        await s.score(request(rid="r2", output="3"))
    s.provider.hold.set()
    await held
    # r2 was never logged: the same id may come with other content
    answer = await s.score(request(rid="r2", output="2 + 2 = 4. The answer is 4."))
    assert answer.status == "scored"
    assert sorted(r.rollout.id for r in s.logged()) == ["held", "r2"]


async def test_sync_mode_scores_again_under_the_steps_new_rubric(make: Any) -> None:
    s = make(**{"pipeline.rollouts_per_step": 1})
    s.provider.script = [verdicts(("A1", 3), ("R1", 0)), verdicts(("A1", 4), ("R1", 0), ("R2", 2))]
    async with asyncio.timeout(DEADLINE_S):
        answer = await s.score(request(breakdown=True), sync=True)
    assert s.steps_run == [0]
    assert answer.rubric_version == 2 and answer.score == pytest.approx((4 + 2) / 8)
    assert answer.breakdown is not None and [c.id for c in answer.breakdown] == ["A1", "R1", "R2"]
    # the log keeps what was scored when the rollout arrived
    (record,) = s.logged()
    assert record.rubric_version == 1 and record.score == pytest.approx(0.75)


async def test_sync_mode_with_an_unchanged_rubric_answers_the_first_score(make: Any) -> None:
    s = make(**{"pipeline.rollouts_per_step": 1})
    s.next_rubric = False
    async with asyncio.timeout(DEADLINE_S):
        answer = await s.score(request(), sync=True)
    assert s.steps_run == [0] and len(s.provider.calls) == 1
    assert answer.rubric_version == 1 and answer.score == pytest.approx(0.75)
    assert answer.breakdown is None and not answer.cached  # not judged (from cache) again


async def test_without_sync_the_answer_does_not_wait_for_the_step(make: Any) -> None:
    s = make(**{"pipeline.rollouts_per_step": 1})
    answer = await s.score(request())
    assert s.coordinator.status(0) == "completing" and answer.rubric_version == 1
    assert len(s.provider.calls) == 1


async def test_per_instance_rollouts_are_scored_and_logged_in_their_inputs_scope(
    make: Any,
) -> None:
    s = make(**{"memory.rubrics_mode": "per_instance"})
    answer = await s.score(request())
    scope = input_id("What is 2 + 2?")
    assert answer.status == "scored"
    (record,) = s.logged()
    assert record.scope == scope != "global"
    assert s.store.current(scope).version == answer.rubric_version


def test_the_log_record_of_an_unscored_answer_has_no_score() -> None:
    unscored = ScoreResponse(score=0.5, rubric_version=1, status="unscored", reason="x")
    record = log_record(request(), unscored, "p1")
    assert record.score is None and record.verdicts == [] and record.reason == "x"
    assert record.scope == "p1" and record.status == "unscored"
