"""The hot path's judge (:class:`Scorer`): verdicts per criterion, sizes, context budget,
cache and in-flight merging, failures, samples and logprobs.

The real gateway with a scripted provider in process (tests/support/scripted_llm.py), Qdrant in
memory, no conftest fixture: ``python -m bench.evaluations.mutation scorer`` runs these with
``--noconftest``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.agents.prompts import parse_data_message
from amaris.llm.budget import CHARS_PER_TOKEN, estimate_messages
from amaris.llm.gateway import LLMGateway
from amaris.llm.providers import Completion, TokenLogprob
from amaris.models import ScoreRequest
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.judge_protocol import judge_messages, verdicts_schema
from amaris.scoring.refusals import OverloadedError, OversizeError
from amaris.scoring.rules import RuleInputError
from amaris.scoring.scorer import Scorer
from amaris.settings import RegexRule, Settings, load_settings
from tests.support.scripted_llm import (
    ScriptedProvider,
    context_overflow,
    gateway,
    scorer_prompt,
    verdicts,
)

A1 = Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True)
A2 = Criterion(
    id="A2",
    text="The reply ends with an answer line.",
    weight=0.5,
    is_anchor=True,
    rule=RegexRule(kind="regex", pattern="Answer: "),
)
R1 = Criterion(id="R1", text="The reply hedges between answers.", weight=-1.0, is_anchor=False)
RUBRIC = RubricVersion(version=3, origin="config", anchors=(A1, A2), adaptive=(R1,))
RULES_ONLY = RubricVersion(version=4, origin="config", anchors=(A2,))


def request(output: str = "2 + 2 = 4. Answer: 4", **rollout: Any) -> ScoreRequest:
    body = {"id": "r1", "input": "What is 2 + 2?", "output": output, **rollout}
    return ScoreRequest.model_validate({"rollout": body, "metadata": {"current_step": 2}})


class Harness:
    def __init__(
        self, settings: Settings, provider: ScriptedProvider, scorer: Scorer, llm: LLMGateway
    ) -> None:
        self.settings, self.provider, self.scorer, self.gateway = settings, provider, scorer, llm


@pytest.fixture
async def make() -> AsyncIterator[Any]:
    """Builds a scorer over a scripted provider; closes what it built."""
    opened: list[Any] = []

    def build(
        *answers: Any, samples: int | None = None, logprobs: bool | None = None, **overrides: Any
    ) -> Harness:
        """``samples`` and ``logprobs`` are the scorer's own defaults unless given."""
        settings = load_settings(None, **overrides)
        provider = ScriptedProvider(default=verdicts(("A1", 4), ("R1", 0)), script=list(answers))
        qdrant = QdrantClient(":memory:")
        store = RubricStore(qdrant, "rubrics", None)
        store.publish(
            anchors=RUBRIC.anchors,
            adaptive=RUBRIC.adaptive,
            origin="config",
            step=None,
            next_adaptive_id=2,
        )
        llm = gateway(settings, provider)
        opened.append((llm, qdrant))
        options: dict[str, Any] = {"samples": samples, "logprobs": logprobs}
        given = {name: value for name, value in options.items() if value is not None}
        scorer = Scorer(settings.scoring, llm, store, scorer_prompt(settings), **given)
        return Harness(settings, provider, scorer, llm)

    yield build
    for llm, qdrant in opened:
        await llm.close()
        qdrant.close()


# -- verdicts ---------------------------------------------------------------------------------


async def test_judge_and_rule_verdicts_come_back_in_the_rubrics_order(make: Any) -> None:
    h = make(verdicts(("R1", 1), ("A1", 3), reason="because"))
    judgement = await h.scorer.judge(request(), RUBRIC)
    assert judgement.failure is None and judgement.rubric_version == 3
    assert judgement.truncated == [] and judgement.cached is False
    assert judgement.breakdown is not None
    assert [(c.id, c.verdict, c.kind) for c in judgement.breakdown] == [
        ("A1", 3, "judge"),
        ("A2", 4, "rule"),
        ("R1", 1, "judge"),
    ]
    a1 = judgement.breakdown[0]
    assert (a1.text, a1.weight, a1.is_anchor, a1.reason) == (A1.text, 1.0, True, "because")
    assert (a1.samples, a1.agreement, a1.from_logprobs) == (None, None, None)
    assert h.scorer.counters["scored"] == 1 and h.scorer.counters["rule_only"] == 0
    # the judge is asked about the judged criteria only, and told which are pitfalls
    (call,) = h.provider.calls
    assert call.criteria() == [
        {"id": "A1", "text": A1.text, "kind": "requirement"},
        {"id": "R1", "text": R1.text, "kind": "pitfall"},
    ]
    assert call.rollout() == {
        "input": "What is 2 + 2?",
        "supplemental_context": "",
        "output": "2 + 2 = 4. Answer: 4",
    }


async def test_the_global_rubric_in_force_is_the_default(make: Any) -> None:
    h = make()
    judgement = await h.scorer.judge(request())
    assert judgement.rubric_version == h.scorer.rubric().version == 1
    assert judgement.breakdown is not None
    assert [c.id for c in judgement.breakdown] == ["A1", "A2", "R1"]


async def test_a_rubric_of_rules_alone_asks_no_judge(make: Any) -> None:
    h = make()
    judgement = await h.scorer.judge(request("no answer line"), RULES_ONLY)
    assert judgement.breakdown is not None
    assert [(c.id, c.verdict) for c in judgement.breakdown] == [("A2", 0)]
    assert h.provider.calls == []
    assert h.scorer.counters["rule_only"] == 1 and h.scorer.counters["scored"] == 1


def test_the_schema_asks_for_one_verdict_per_criterion_on_the_scale() -> None:
    schema = verdicts_schema(("A1", "R1"))
    items = schema["properties"]["verdicts"]
    assert items["minItems"] == items["maxItems"] == 2
    verdict = items["items"]["properties"]
    assert list(verdict) == ["id", "reason", "score"]
    assert verdict["id"] == {"type": "string", "enum": ["A1", "R1"]}
    assert verdict["score"] == {"type": "integer", "enum": [0, 1, 2, 3, 4]}
    # built per rubric: another rubric's schema is its own
    assert verdicts_schema(("A1",))["properties"]["verdicts"]["maxItems"] == 1


async def test_the_request_asks_for_the_rubrics_schema(make: Any) -> None:
    h = make()
    await h.scorer.judge(request(), RUBRIC)
    (call,) = h.provider.calls
    assert call.response_format is not None
    assert call.response_format["json_schema"]["schema"] == verdicts_schema(("A1", "R1"))


def test_judge_messages_put_the_rollout_in_the_user_message_prompt_first() -> None:
    messages = judge_messages(
        "Judge it.", RUBRIC, {"output": "4", "input": "2+2?", "supplemental_context": "ref"}
    )
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"].startswith("Judge it.")
    user = messages[1]["content"]
    assert user.index('"input"') < user.index('"supplemental_context"') < user.index('"output"')
    assert "Judge it." not in user and "2+2?" not in messages[0]["content"]


async def test_verdicts_that_do_not_cover_each_criterion_once_are_asked_again(
    make: Any,
) -> None:
    for bad, said in [
        (verdicts(("A1", 4)), "missing ['R1'], unknown [], duplicated []"),
        (verdicts(("A1", 4), ("A1", 3)), "missing ['R1'], unknown [], duplicated ['A1']"),
        (verdicts(("A1", 4), ("R9", 1)), "missing ['R1'], unknown ['R9'], duplicated []"),
    ]:
        h = make(bad)
        judgement = await h.scorer.judge(request(), RUBRIC)
        assert judgement.breakdown is not None
        assert [c.verdict for c in judgement.breakdown] == [4, 4, 0]
        _, again = h.provider.calls
        assert said in again.messages[-1]["content"]
    # Every criterion once, and a verdict on an id the rubric lacks: that one is ignored,
    # the reply read as it is (tests/llm/test_reply_format.py).
    h = make(verdicts(("A1", 1), ("R1", 0), ("R9", 3)))
    judgement = await h.scorer.judge(request(), RUBRIC)
    assert judgement.breakdown is not None
    assert [(c.id, c.verdict) for c in judgement.breakdown] == [("A1", 1), ("A2", 4), ("R1", 0)]
    assert len(h.provider.calls) == 1


def test_a_pitfall_is_told_by_its_negative_weight_alone() -> None:
    light = Criterion(id="A3", text="Shows the working.", weight=0.5, is_anchor=True)
    faint = Criterion(id="R2", text="Restates the question.", weight=-0.5, is_anchor=False)
    rubric = RubricVersion(version=6, origin="config", anchors=(A1, light), adaptive=(faint,))
    empty = {"input": "", "output": "", "supplemental_context": ""}
    messages = judge_messages("Judge it.", rubric, empty)
    criteria = parse_data_message(messages[0]["content"])["criteria"]
    assert [(c["id"], c["kind"]) for c in criteria] == [
        ("A1", "requirement"),
        ("A3", "requirement"),
        ("R2", "pitfall"),
    ]


# -- sizes ------------------------------------------------------------------------------------


async def test_a_field_over_the_limit_is_refused_by_name(make: Any) -> None:
    h = make(**{"scoring.max_field_chars": 20})
    assert h.scorer.settings.max_field_chars == 20
    h.scorer.check(request("x" * 20))  # at the limit: fine
    with pytest.raises(OversizeError, match=r"rollout\.output has 21 characters; the limit is 20"):
        h.scorer.check(request("x" * 21))
    with pytest.raises(OversizeError) as caught:
        await h.scorer.judge(request("x" * 21), RUBRIC)
    assert caught.value.field == "rollout.output"
    assert h.provider.calls == []


async def test_with_truncate_the_judged_fields_are_cut_and_the_others_refused(make: Any) -> None:
    h = make(**{"scoring.max_field_chars": 100, "scoring.oversize": "truncate"})
    long = "a" * 80 + "b" * 80
    h.scorer.check(request(long, supplemental_context="c" * 200))
    with pytest.raises(OversizeError) as caught:
        h.scorer.check(request("4", group_id="g" * 101))
    assert caught.value.field == "rollout.group_id"
    judgement = await h.scorer.judge(request(long, supplemental_context="c" * 100), RUBRIC)
    assert judgement.truncated == ["rollout.output"]
    assert h.scorer.counters["truncated.max_field_chars"] == 1
    sent = h.provider.calls[0].rollout()
    assert (
        len(sent["output"]) == 100 and sent["output"].startswith("a") and sent["output"][-1] == "b"
    )
    assert sent["supplemental_context"] == "c" * 100
    await h.scorer.judge(request("short"), RUBRIC)
    assert h.scorer.counters["truncated.max_field_chars"] == 1


async def test_a_rule_needing_a_reference_refuses_a_rollout_without_one(make: Any) -> None:
    exact = Criterion(
        id="A3", text="Right answer.", weight=1.0, is_anchor=True, rule={"kind": "exact"}
    )
    rubric = RubricVersion(version=5, origin="config", anchors=(A1, exact))
    h = make()
    with pytest.raises(RuleInputError, match=r"rollout\.supplemental_context"):
        h.scorer.check(request(), rubric)
    h.scorer.check(request(supplemental_context="4"), rubric)
    h.scorer.check(request())  # the global rubric in force has no such rule


async def test_a_prompt_over_the_context_budget_is_cut_to_fit(make: Any) -> None:
    h = make(
        **{"agents.scorer.context_window": 3000, "agents.scorer.max_tokens": 200},
        **{"scoring.cache_size": 0},
    )
    long = "word " * 2000
    judgement = await h.scorer.judge(request(long), RUBRIC)
    assert judgement.truncated == ["rollout.output"]
    assert h.scorer.counters["truncated.context_window"] == 1
    sent = h.provider.calls[0].rollout()["output"]
    assert "[... truncated by amaris ...]" in sent and sent.startswith("word word")
    assert sent.endswith("word ") and len(sent) < len(long)
    # a rollout that fits goes whole
    fits = "word " * 100
    judgement = await h.scorer.judge(request(fits), RUBRIC)
    assert judgement.truncated == [] and h.provider.calls[1].rollout()["output"] == fits
    assert h.scorer.counters["truncated.context_window"] == 1


async def test_the_budget_counts_a_field_as_the_json_the_judge_reads(make: Any) -> None:
    # control characters take 6 characters each in the prompt's JSON ("\u0001")
    h = make(**{"agents.scorer.context_window": 3000, "agents.scorer.max_tokens": 200})
    judgement = await h.scorer.judge(request("\x01" * 1400), RUBRIC)
    assert judgement.truncated == ["rollout.output"]
    assert len(h.provider.calls[0].rollout()["output"]) < 1400


async def test_a_field_cut_by_size_then_by_the_budget_is_named_once(make: Any) -> None:
    h = make(
        **{"agents.scorer.context_window": 3000, "agents.scorer.max_tokens": 200},
        **{"scoring.max_field_chars": 8000, "scoring.oversize": "truncate"},
    )
    judgement = await h.scorer.judge(request("word " * 1800), RUBRIC)
    assert judgement.truncated == ["rollout.output"]
    assert h.scorer.counters["truncated.max_field_chars"] == 1
    assert h.scorer.counters["truncated.context_window"] == 1
    assert len(h.provider.calls[0].rollout()["output"]) < 8000


async def test_a_rollout_whose_json_fits_the_room_goes_whole_one_character_more_is_cut(
    make: Any,
) -> None:
    # The room is the budget less the prompt with empty fields (their quotes counted); a
    # character takes at most 6 in the JSON ("\u0001"). A rollout of control characters
    # taking the room, exactly or within 6, goes whole; one character more is cut.
    empty = {"input": "", "output": "", "supplemental_context": ""}
    exact = inexact = False
    for window in range(3000, 3012):
        h = make(**{"agents.scorer.context_window": window, "agents.scorer.max_tokens": 200})
        budget = await h.gateway.prompt_budget("scorer")
        assert budget is not None
        bare = estimate_messages(judge_messages(scorer_prompt(h.settings), RUBRIC, empty))
        room = int((budget - bare) * CHARS_PER_TOKEN)
        exact, inexact = exact or room % 6 == 0, inexact or room % 6 != 0
        chars = room // 6
        fits = request("\x01" * (chars - 10), input="\x02" * 10)
        judgement = await h.scorer.judge(fits, RUBRIC)
        assert judgement.truncated == [], (window, room)
        assert h.provider.calls[-1].rollout()["output"] == "\x01" * (chars - 10)
        over = request("\x01" * (chars - 9), input="\x02" * 10)
        assert (await h.scorer.judge(over, RUBRIC)).truncated == ["rollout.output"]
        if exact and inexact:
            break
    assert exact and inexact


async def test_a_window_the_instructions_nearly_fill_leaves_the_rollout_whole(make: Any) -> None:
    # ~600 prompt tokens of instructions and rubric, a window leaving room for ~50 more
    h = make(**{"agents.scorer.context_window": 900, "agents.scorer.max_tokens": 200})
    long = "word " * 2000
    judgement = await h.scorer.judge(request(long), RUBRIC)
    assert judgement.truncated == [] and h.provider.calls[0].rollout()["output"] == long


async def test_a_context_overflow_the_estimate_missed_is_cut_and_judged_again(make: Any) -> None:
    h = make(
        context_overflow(9000),
        **{"agents.scorer.context_window": 4096, "agents.scorer.max_tokens": 200},
    )
    text = "word " * 1500  # fits the estimate, not the server's count
    judgement = await h.scorer.judge(request(text), RUBRIC)
    assert judgement.failure is None and judgement.truncated == ["rollout.output"]
    first, second = h.provider.calls
    assert first.rollout()["output"] == text
    assert len(second.rollout()["output"]) < len(text)
    assert h.scorer.counters["truncated.context_window"] == 1
    # judged on the cut text: the cache keeps that, the same rollout is answered from it
    again = await h.scorer.judge(request(text), RUBRIC)
    assert again.cached and len(h.provider.calls) == 2


async def test_an_overflow_of_a_cut_prompt_is_counted_once(make: Any) -> None:
    h = make(
        context_overflow(9000),
        **{"agents.scorer.context_window": 4096, "agents.scorer.max_tokens": 200},
    )
    text = "word " * 5000  # cut by the estimate already, then cut again
    judgement = await h.scorer.judge(request(text), RUBRIC)
    assert judgement.failure is None and judgement.truncated == ["rollout.output"]
    first, second = h.provider.calls
    assert len(second.rollout()["output"]) < len(first.rollout()["output"]) < len(text)
    assert h.scorer.counters["truncated.context_window"] == 1


async def test_an_overflow_no_cut_can_fix_leaves_the_rollout_unscored(make: Any) -> None:
    h = make(context_overflow(9000), **{"agents.scorer.context_window": 4096})
    judgement = await h.scorer.judge(request("short"), RUBRIC)
    assert judgement.breakdown is None
    assert judgement.failure is not None
    assert judgement.failure.startswith("judge_context_overflow: scorer: ")
    assert len(h.provider.calls) == 1
    assert h.scorer.counters["unscored.judge_context_overflow"] == 1


async def test_an_overflow_the_budget_does_not_shrink_for_is_not_asked_again(
    make: Any,
) -> None:
    # The endpoint's real window is below the configured one, and it counts fewer tokens
    # than estimated: nothing learnt, the same cut would overflow again.
    h = make(
        context_overflow(3000),
        **{"agents.scorer.context_window": 4096, "agents.scorer.max_tokens": 200},
    )
    judgement = await h.scorer.judge(request("word " * 5000), RUBRIC)
    assert judgement.breakdown is None and judgement.failure is not None
    assert judgement.failure.startswith("judge_context_overflow: scorer: ")
    assert judgement.truncated == ["rollout.output"]
    assert len(h.provider.calls) == 1


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "kind", "calls"),
    [
        (RuntimeError("connection refused"), "judge_unavailable", 1),
        (Completion(content="not json at all"), "judge_invalid", 2),  # re-asked once
        (Completion(content='{"verdicts": [', finish_reason="length"), "judge_truncated", 1),
    ],
)
async def test_a_judge_failure_is_unscored_with_its_kind(
    make: Any, answer: Any, kind: str, calls: int, caplog: pytest.LogCaptureFixture
) -> None:
    h = make(*[answer] * calls, **{"scoring.max_field_chars": 14, "scoring.oversize": "truncate"})
    with caplog.at_level(logging.WARNING, logger="amaris.scoring.scorer"):
        judgement = await h.scorer.judge(request("y" * 15), RUBRIC)
    assert judgement.breakdown is None and judgement.rubric_version == 3
    assert judgement.failure is not None and judgement.failure.startswith(f"{kind}: ")
    assert judgement.truncated == ["rollout.output"]
    assert h.scorer.counters["unscored"] == 1 and h.scorer.counters[f"unscored.{kind}"] == 1
    assert h.scorer.counters["scored"] == 0
    assert "unscored rollout 'r1'" in caplog.text
    assert len(h.provider.calls) == calls
    # a failure is not cached: the next identical request asks again
    again = await h.scorer.judge(request("y" * 15), RUBRIC)
    assert again.breakdown is not None and not again.cached


async def test_no_verdict_within_the_timeout_is_judge_timeout(make: Any) -> None:
    h = make(**{"scoring.timeout_seconds": 0.2})
    h.provider.hold = asyncio.Event()  # never set: the judge never answers
    judgement = await h.scorer.judge(request(), RUBRIC)
    assert judgement.failure == ("judge_timeout: no verdict within scoring.timeout_seconds (0.2)")
    assert h.scorer.counters["unscored.judge_timeout"] == 1
    assert h.scorer.pending == 0


# -- cache and in-flight merging --------------------------------------------------------------


async def test_an_identical_request_is_answered_from_the_cache(make: Any) -> None:
    h = make(verdicts(("A1", 2), ("R1", 1)))
    first = await h.scorer.judge(request(), RUBRIC)
    again = await h.scorer.judge(request(), RUBRIC)
    assert again.cached and not first.cached
    assert again.breakdown == first.breakdown and again.rubric_version == 3
    assert len(h.provider.calls) == 1 and h.scorer.counters["cached"] == 1
    assert h.scorer.counters["scored"] == 1


@pytest.mark.parametrize(
    "other",
    [
        request("2 + 2 = 4. Answer: 4", input="What is 2 + 3?"),
        request("2 + 2 = 5. Answer: 5"),
        request(supplemental_context="4"),
    ],
)
async def test_another_rollout_or_rubric_is_judged_anew(make: Any, other: ScoreRequest) -> None:
    h = make()
    await h.scorer.judge(request(), RUBRIC)
    assert not (await h.scorer.judge(other, RUBRIC)).cached
    newer = RUBRIC.model_copy(update={"version": 9})
    assert not (await h.scorer.judge(request(), newer)).cached
    other_scope = RUBRIC.model_copy(update={"scope": "p1"})
    assert not (await h.scorer.judge(request(), other_scope)).cached
    assert len(h.provider.calls) == 4


async def test_fields_are_kept_apart_in_the_cache_key(make: Any) -> None:
    h = make()
    await h.scorer.judge(request("ab", input="x", supplemental_context="c"), RUBRIC)
    moved = await h.scorer.judge(request("b", input="x", supplemental_context="ac"), RUBRIC)
    assert not moved.cached


async def test_the_cache_keeps_the_most_recently_used(make: Any) -> None:
    h = make(**{"scoring.cache_size": 2})
    a, b, c = request("a"), request("b"), request("c")
    for r in (a, b, a, c):  # a used again: b is the oldest when c comes
        await h.scorer.judge(r, RUBRIC)
    assert len(h.provider.calls) == 3
    assert (await h.scorer.judge(a, RUBRIC)).cached
    assert (await h.scorer.judge(c, RUBRIC)).cached
    assert not (await h.scorer.judge(b, RUBRIC)).cached


async def test_a_cache_of_size_one_keeps_the_last(make: Any) -> None:
    h = make(**{"scoring.cache_size": 1})
    await h.scorer.judge(request("a"), RUBRIC)
    assert (await h.scorer.judge(request("a"), RUBRIC)).cached
    await h.scorer.judge(request("b"), RUBRIC)
    assert not (await h.scorer.judge(request("a"), RUBRIC)).cached
    assert len(h.provider.calls) == 3


async def test_a_cache_of_size_zero_keeps_nothing(make: Any) -> None:
    h = make(**{"scoring.cache_size": 0})
    await h.scorer.judge(request(), RUBRIC)
    assert not (await h.scorer.judge(request(), RUBRIC)).cached
    assert len(h.provider.calls) == 2


async def test_identical_requests_in_flight_share_one_judge_call(make: Any) -> None:
    h = make(verdicts(("A1", 1), ("R1", 2)))
    h.provider.hold = asyncio.Event()

    async def release() -> None:
        await h.provider.arrived.wait()
        assert h.scorer.pending == 1
        h.provider.hold.set()

    first, second, _ = await asyncio.gather(
        h.scorer.judge(request(), RUBRIC), h.scorer.judge(request(), RUBRIC), release()
    )
    assert len(h.provider.calls) == 1 and h.scorer.pending == 0
    assert first.breakdown == second.breakdown and first.breakdown is not None
    assert [c.verdict for c in first.breakdown] == [1, 4, 2]


async def test_a_shared_call_that_fails_fails_both_requests(make: Any) -> None:
    h = make(RuntimeError("down"))
    h.provider.hold = asyncio.Event()

    async def release() -> None:
        await h.provider.arrived.wait()
        h.provider.hold.set()

    first, second, _ = await asyncio.gather(
        h.scorer.judge(request(), RUBRIC), h.scorer.judge(request(), RUBRIC), release()
    )
    for judgement in (first, second):
        assert judgement.failure is not None
        assert judgement.failure.startswith("judge_unavailable: scorer: down")
    assert len(h.provider.calls) == 1 and h.scorer.counters["unscored"] == 2


async def test_a_cancelled_first_request_leaves_the_sharer_an_ordinary_failure(
    make: Any,
) -> None:
    h = make()
    h.provider.hold = asyncio.Event()  # never set
    first = asyncio.create_task(h.scorer.judge(request(), RUBRIC))

    async def cancel_first() -> None:
        await h.provider.arrived.wait()
        first.cancel()

    second, _ = await asyncio.gather(h.scorer.judge(request(), RUBRIC), cancel_first())
    assert first.cancelled()
    assert second.failure == ("judge_unavailable: the shared judge call was cancelled")
    assert h.scorer.pending == 0


async def test_past_max_pending_a_new_request_is_refused_but_a_sharer_is_not(
    make: Any,
) -> None:
    h = make(**{"scoring.max_pending": 1})
    h.provider.hold = asyncio.Event()

    async def crowd() -> None:
        await h.provider.arrived.wait()
        with pytest.raises(OverloadedError, match="1 judge calls pending"):
            await h.scorer.judge(request("another"), RUBRIC)
        assert h.scorer.counters["overloaded"] == 1
        h.provider.hold.set()

    first, sharer, _ = await asyncio.gather(
        h.scorer.judge(request(), RUBRIC), h.scorer.judge(request(), RUBRIC), crowd()
    )
    assert first.breakdown is not None and sharer.breakdown is not None
    # a request answered from the cache is never refused
    h.provider.hold = asyncio.Event()
    blocked = asyncio.create_task(h.scorer.judge(request("third"), RUBRIC))
    await h.provider.arrived.wait()
    assert (await h.scorer.judge(request(), RUBRIC)).cached
    h.provider.hold.set()
    assert (await blocked).breakdown is not None


async def test_max_pending_above_256_is_enforced_too(make: Any) -> None:
    h = make(**{"scoring.max_pending": 257})
    h.provider.hold = asyncio.Event()
    held = [asyncio.create_task(h.scorer.judge(request(f"r{i}"), RUBRIC)) for i in range(257)]
    await h.provider.arrived.wait()
    assert h.scorer.pending == 257
    # refused at once; the limit only keeps a wrong answer (queued behind the held calls)
    # from hanging the test
    with pytest.raises(OverloadedError, match="257 judge calls pending"):
        async with asyncio.timeout(20):
            await h.scorer.judge(request("one more"), RUBRIC)
    h.provider.hold.set()
    assert all(j.breakdown is not None for j in await asyncio.gather(*held))


# -- samples and logprobs ---------------------------------------------------------------------


async def test_k_samples_give_their_mean_samples_and_agreement(make: Any) -> None:
    h = make(
        verdicts(("A1", 4), ("R1", 0), reason="first"),
        verdicts(("R1", 0), ("A1", 3), reason="second"),
        verdicts(("A1", 4), ("R1", 1), reason="third"),
        samples=3,
    )
    judgement = await h.scorer.judge(request(), RUBRIC)
    assert judgement.breakdown is not None
    a1, a2, r1 = judgement.breakdown
    assert a1.verdict == pytest.approx(11 / 3) and a1.samples == [4, 3, 4]
    assert a1.agreement == pytest.approx(2 / 3) and a1.reason == "first"
    assert r1.verdict == pytest.approx(1 / 3) and r1.samples == [0, 0, 1]
    assert a2.samples is None  # a rule is not sampled
    assert len(h.provider.calls) == 3


def with_logprobs(a1: dict[str, float], r1: int) -> Completion:
    """A reply whose A1 score token carries alternatives."""
    head = '{"verdicts": [{"id": "A1", "reason": "ok", "score": '
    tail = f'}}, {{"id": "R1", "reason": "ok", "score": {r1}}}]}}'
    ranked = sorted(a1.items(), key=lambda item: -item[1])
    top = tuple((t, math.log(p)) for t, p in ranked)
    tokens = (
        TokenLogprob(head, 0.0),
        TokenLogprob(ranked[0][0], top[0][1], top),
        TokenLogprob(tail, 0.0),
    )
    return Completion(content=head + ranked[0][0] + tail, logprobs=tokens)


async def test_by_default_one_judge_call_gives_the_judges_integer_verdicts(make: Any) -> None:
    # the scorer's defaults (what `amaris check-judge` builds): one sample, logprobs unread
    h = make(with_logprobs({"4": 0.5, "3": 0.5}, 0))
    judgement = await h.scorer.judge(request(), RUBRIC)
    assert judgement.breakdown is not None
    a1 = judgement.breakdown[0]
    assert (a1.verdict, a1.samples, a1.agreement, a1.from_logprobs) == (4, None, None, None)
    assert len(h.provider.calls) == 1
    assert h.scorer.counters["logprobs_used"] == h.scorer.counters["logprobs_missing"] == 0


async def test_with_logprobs_a_verdict_is_the_expected_score(make: Any) -> None:
    h = make(with_logprobs({"4": 0.5, "3": 0.5}, 0), logprobs=True)
    judgement = await h.scorer.judge(request(), RUBRIC)
    assert judgement.breakdown is not None
    a1, _, r1 = judgement.breakdown
    assert a1.verdict == pytest.approx(3.5) and r1.verdict == 0
    assert a1.from_logprobs == 1 and a1.samples is None
    assert h.scorer.counters["logprobs_used"] == 1


async def test_with_logprobs_missing_the_verdict_stays_an_integer(make: Any) -> None:
    h = make(verdicts(("A1", 3), ("R1", 0)), logprobs=True)
    judgement = await h.scorer.judge(request(), RUBRIC)
    assert judgement.breakdown is not None
    assert judgement.breakdown[0].verdict == 3 and judgement.breakdown[0].from_logprobs == 0
    assert h.scorer.counters["logprobs_missing"] == 1
    assert h.scorer.counters["logprobs_used"] == 0


async def test_samples_with_logprobs_count_the_replies_that_had_them(make: Any) -> None:
    h = make(
        with_logprobs({"4": 0.5, "2": 0.5}, 1),
        verdicts(("A1", 4), ("R1", 1)),
        samples=2,
        logprobs=True,
    )
    judgement = await h.scorer.judge(request(), RUBRIC)
    assert judgement.breakdown is not None
    a1 = judgement.breakdown[0]
    assert a1.samples == [pytest.approx(3.0), 4] and a1.from_logprobs == 1
    assert a1.agreement == 0.5
