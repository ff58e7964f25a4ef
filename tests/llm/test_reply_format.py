"""What a judge without a schema is shown (``json_object``, ``none``), and how its reply is read.

The real gateway and scorer over the scripted provider (tests/support/scripted_llm.py): the
LLM is faked at the gateway seam.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError
from qdrant_client import QdrantClient

from amaris.llm.budget import estimate_messages
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway
from amaris.llm.providers import Completion
from amaris.llm.reply_format import FORMAT_HEADING, example_of, with_instructions
from amaris.llm.schema import strict_schema
from amaris.models import ScoreRequest
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.judge_protocol import (
    JudgeVerdicts,
    check_ids,
    judge_messages,
    verdicts_example,
    verdicts_schema,
)
from amaris.scoring.scorer import Scorer
from amaris.settings import load_settings
from tests.support.scripted_llm import (
    ScriptedProvider,
    answer,
    gateway,
    scorer_prompt,
    settings,
    status,
    verdicts,
)

A1 = Criterion(id="A1", text="The final answer is correct.", weight=1.0, is_anchor=True)
R1 = Criterion(id="R1", text="The reply hedges between answers.", weight=-1.0, is_anchor=False)
RUBRIC = RubricVersion(version=3, origin="config", anchors=(A1,), adaptive=(R1,))
ONE = RubricVersion(version=4, origin="config", anchors=(A1,))
REFUSED = "response_format: type 'json_schema' is not supported by this server"
EXAMPLE = (
    '{"verdicts": [{"id": "A1", "reason": "One short sentence on this criterion.", '
    '"score": 2}, {"id": "R1", "reason": "One short sentence on this criterion.", "score": 2}]}'
)
"""The example the scorer shows for :data:`RUBRIC`: its ids in order, the reason before the
score, as the strict schema orders them."""


def request(output: str = "2 + 2 = 4", n: int = 1) -> ScoreRequest:
    body = {"id": f"r{n}", "input": f"What is 2 + {n + 1}?", "output": output}
    return ScoreRequest.model_validate({"rollout": body, "metadata": {"current_step": 2}})


def reply(body: Any) -> Completion:
    return Completion(content=json.dumps(body), prompt_tokens=10, completion_tokens=10)


@pytest.fixture
async def make() -> AsyncIterator[Any]:
    """A scorer over a scripted provider with ``overrides`` (closed after the test)."""
    opened: list[Any] = []

    def build(*answers: Any, **overrides: Any) -> tuple[Scorer, ScriptedProvider]:
        config = load_settings(None, **overrides)
        provider = ScriptedProvider(default=verdicts(("A1", 4), ("R1", 0)), script=list(answers))
        qdrant = QdrantClient(":memory:")
        llm = gateway(config, provider)
        opened.append((llm, qdrant))
        store = RubricStore(qdrant, "rubrics", None)
        return Scorer(config.scoring, llm, store, scorer_prompt(config)), provider

    yield build
    for llm, qdrant in opened:
        await llm.close()
        qdrant.close()


JSON_OBJECT = {"agents.scorer.structured_output": "json_object"}


# -- what the judge is shown ------------------------------------------------------------------


async def test_json_object_mode_shows_one_filled_example_with_the_rubrics_ids(make: Any) -> None:
    scorer, provider = make(**JSON_OBJECT)
    judgement = await scorer.judge(request(), RUBRIC)
    assert judgement.failure is None
    (call,) = provider.calls
    assert call.response_format == {"type": "json_object"}
    plain = judge_messages(scorer_prompt(load_settings(None)), RUBRIC, _fields(request()))
    system = call.messages[0]["content"]
    # The system message is the json_schema one, then the example: the rubric's ids in
    # order, every key of a verdict, on the line after the heading, the message's end.
    assert system == f"{plain[0]['content']}\n\n{FORMAT_HEADING}\n{EXAMPLE}"
    assert call.messages[1:] == plain[1:]
    shown = JudgeVerdicts.model_validate_json(system.rsplit("\n", 1)[1])
    check_ids(RUBRIC)(shown)  # the example is itself a valid reply


async def test_the_json_schema_prompt_is_sent_as_written(make: Any) -> None:
    scorer, provider = make()
    await scorer.judge(request(), RUBRIC)
    (call,) = provider.calls
    assert call.response_format is not None and call.response_format["type"] == "json_schema"
    assert call.messages == judge_messages(
        scorer_prompt(load_settings(None)), RUBRIC, _fields(request())
    )
    assert FORMAT_HEADING not in call.messages[0]["content"]


async def test_the_example_keeps_the_system_message_identical_across_rollouts(make: Any) -> None:
    # One rubric, two rollouts: the system message (the cached prefix) is byte-identical.
    scorer, provider = make(**JSON_OBJECT)
    await scorer.judge(request("4", 1), RUBRIC)
    await scorer.judge(request("5", 2), RUBRIC)
    first, second = provider.calls
    assert first.messages[0] == second.messages[0]
    assert first.messages[1] != second.messages[1]
    assert EXAMPLE in first.messages[0]["content"]


async def test_a_refused_json_schema_falls_back_to_json_object_with_the_example() -> None:
    endpoint = ScriptedProvider([status(400, REFUSED), answer(EXAMPLE)])
    llm = LLMGateway(settings(), {"scorer": endpoint}, CallLog(None))
    messages = judge_messages("Judge.", RUBRIC, _fields(request()))
    example = verdicts_example(("A1", "R1"))
    result = await llm.structured(
        "scorer",
        messages,
        JudgeVerdicts,
        check=check_ids(RUBRIC),
        json_schema=verdicts_schema(("A1", "R1")),
        example=example,
    )
    await llm.close()
    assert [v.id for v in result.verdicts] == ["A1", "R1"]
    refused, fallback = endpoint.calls
    assert refused.response_format is not None
    assert refused.response_format["type"] == "json_schema"
    assert refused.messages == messages  # the json_schema request: the prompt as written
    assert fallback.response_format == {"type": "json_object"}
    assert fallback.messages[0]["content"].endswith(f"\n\n{FORMAT_HEADING}\n{EXAMPLE}")
    assert fallback.messages[1:] == messages[1:]


class Plan(BaseModel):
    """A pipeline-like reply: an enumeration, a bounded number, a list of objects."""

    kind: str = Field(json_schema_extra={"enum": ["add", "drop"]})
    weight: int = Field(ge=-4, le=4)
    share: float = Field(ge=0.0, le=1.0)
    steps: list[str] = Field(min_length=2)
    done: bool


async def test_without_an_example_one_is_made_from_the_schema_in_json_object_and_none() -> None:
    # json_object configured, then none configured: both show the example made from the
    # agent's schema; the offline judge and json_schema are never shown one.
    for mode in ("json_object", "none"):
        endpoint = ScriptedProvider(
            [
                answer(
                    '{"kind": "add", "weight": 1, "share": 0.5, "steps": ["a", "b"], "done": true}'
                )
            ]
        )
        overrides = {"agents.scorer.structured_output": mode}
        llm = LLMGateway(settings(**overrides), {"scorer": endpoint}, CallLog(None))
        await llm.structured("scorer", [{"role": "user", "content": "Plan."}], Plan)
        await llm.close()
        (sent,) = endpoint.calls
        expected = {"kind": "add", "weight": 0, "share": 0.5, "steps": ["...", "..."], "done": True}
        assert sent.messages == [
            {"role": "system", "content": f"{FORMAT_HEADING}\n{json.dumps(expected)}"},
            {"role": "user", "content": "Plan."},
        ]
        Plan.model_validate(expected)


def test_example_of_a_strict_schema() -> None:
    schema = verdicts_schema(("A1", "A2", "R7"))
    assert example_of(schema) == {
        "verdicts": [
            {"id": "A1", "reason": "<reason>", "score": 0},
            {"id": "A2", "reason": "<reason>", "score": 1},
            {"id": "R7", "reason": "<reason>", "score": 2},
        ]
    }
    nested = example_of(strict_schema(Plan))
    assert nested == {
        "kind": "add",
        "weight": 0,
        "share": 0.5,
        "steps": ["...", "..."],
        "done": True,
    }


def test_instructions_go_after_the_first_system_message() -> None:
    messages = [
        {"role": "user", "content": "u"},
        {"role": "system", "content": "s \n"},
        {"role": "system", "content": "t"},
    ]
    assert with_instructions(messages, "X") == [
        {"role": "user", "content": "u"},
        {"role": "system", "content": "s\n\nX"},
        {"role": "system", "content": "t"},
    ]
    assert messages[1]["content"] == "s \n"  # not changed in place


async def test_a_long_rollout_is_cut_so_the_prompt_with_its_example_fits(make: Any) -> None:
    # The context budget counts the example the gateway adds: the prompt sent, example
    # included, is within the window less max_tokens.
    scorer, provider = make(
        **JSON_OBJECT,
        **{"agents.scorer.context_window": 3000, "agents.scorer.max_tokens": 200},
    )
    judgement = await scorer.judge(request("word " * 3000), RUBRIC)
    assert judgement.truncated == ["rollout.output"]
    (call,) = provider.calls
    assert EXAMPLE in call.messages[0]["content"]
    assert 2700 < estimate_messages(call.messages) <= 3000 - 200


# -- how its reply is read --------------------------------------------------------------------


async def test_a_verdict_on_an_id_the_rubric_lacks_is_ignored(make: Any) -> None:
    # SmolLM2-135M under json_object: the one verdict asked for, and one of its own.
    extra = reply(
        {
            "verdicts": [
                {"id": "A1", "score": 3},
                {"id": "B1", "reason": "made up", "score": 1},
            ]
        }
    )
    scorer, provider = make(extra, **JSON_OBJECT)
    judgement = await scorer.judge(request(), ONE)
    assert judgement.failure is None, judgement.failure
    assert judgement.breakdown is not None
    assert [(c.id, c.verdict, c.reason) for c in judgement.breakdown] == [("A1", 3, "")]
    assert len(provider.calls) == 1  # read as it is: no re-ask


@pytest.mark.parametrize(
    "body",
    [
        {"id": "A1", "reason": "right", "score": 4},
        {"verdicts": {"id": "A1", "reason": "right", "score": 4}},
        {"verdicts": [{"id": "A1", "reason": "right", "score": "4"}]},
    ],
    ids=["a-lone-verdict", "verdicts-an-object", "score-a-numeral"],
)
async def test_a_lone_verdict_is_read_as_the_list_of_it(make: Any, body: Any) -> None:
    scorer, provider = make(reply(body), **JSON_OBJECT)
    judgement = await scorer.judge(request(), ONE)
    assert judgement.breakdown is not None, judgement.failure
    assert [(c.id, c.verdict, c.reason) for c in judgement.breakdown] == [("A1", 4, "right")]
    assert len(provider.calls) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"verdicts": [{"id": "A1", "score": 3}, {"id": "A1", "score": 2}]},  # twice
        {"verdicts": [{"id": "B1", "score": 3}]},  # A1 missing
        {"verdicts": [{"id": "A1", "score": 3.5}]},  # off the integer scale
        {"verdicts": [{"id": "A1", "score": "True"}]},
        {"verdicts": [{"id": "A1", "score": 3}, {"id": "B1", "score": 9}]},  # B1 off the scale
        {"id": "A1", "reason": "no score"},
        {"verdicts": {"A1": 3}},
    ],
)
def test_the_tolerant_read_stays_typed(body: Any) -> None:
    with pytest.raises((ValueError, ValidationError)):
        check_ids(ONE)(JudgeVerdicts.model_validate(body))


def _fields(score: ScoreRequest) -> dict[str, str]:
    rollout = score.rollout
    return {
        "input": rollout.input,
        "supplemental_context": rollout.supplemental_context or "",
        "output": rollout.output,
    }
