"""Structured outputs: strict JSON schemas per agent and per rubric, and the per-endpoint
fallback json_schema -> json_object -> prompt only (through real HTTP, the fake LLM)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from amaris.agents import BatchSummary, IndividualAnalysis, QueryPlan, RubricUpdateProposal
from amaris.llm.gateway import LLMUnavailableError
from amaris.llm.schema import strict_schema
from amaris.scoring.judge_protocol import JudgeVerdicts, verdicts_schema
from amaris.settings import AGENTS
from amaris.sim.judge_server import Reply
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.gateway import EXPECTED, GOOD, MESSAGES, Verdict, call_log, open_gateway
from tests.support.no_deps import import_xgrammar
from tests.support.settings import llm_settings, make_settings

xgrammar = import_xgrammar()
"""Installed with ``--no-deps`` on a machine that lacks it (tests/support/no_deps.py): the dev
extra leaves it out, with the GPU compiler it would pull."""

AGENT_MODELS: list[type[BaseModel]] = [
    JudgeVerdicts,
    IndividualAnalysis,
    BatchSummary,
    QueryPlan,
    RubricUpdateProposal,
]
"""Every agent's output model (the summarizer and meta-summarizer share BatchSummary)."""

STRICT_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
}
BODY = {
    "rollout": {"id": "r1", "input": "What is 2+2?", "output": "4", "supplemental_context": "4"}
}


def _walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [found for item in node for found in _walk(item)]
    if not isinstance(node, dict):
        return []
    found = [node]
    for key in ("items", "anyOf"):
        if key in node:
            found += _walk(node[key])
    for sub in node.get("properties", {}).values():
        found += _walk(sub)
    return found


# -- the schemas ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", AGENT_MODELS, ids=lambda m: m.__name__)
def test_agent_schemas_are_strict_mode_compatible(model: type[BaseModel]) -> None:
    schema = strict_schema(model)
    nodes = _walk(schema)
    objects = [n for n in nodes if n.get("type") == "object"]
    assert objects and schema["type"] == "object"
    for node in nodes:
        assert set(node) <= STRICT_KEYWORDS, set(node) - STRICT_KEYWORDS
    for node in objects:
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])
    # vLLM's grammar engine accepts it as a strict schema.
    xgrammar.Grammar.from_json_schema(json.dumps(schema), strict_mode=True)


def test_string_and_list_lengths_stay_in_the_strict_schema() -> None:
    # A summary's memory entry must not be empty: a constrained decoder that sees the
    # minLength cannot write "" (which validation refuses, twice, failing the summary).
    entry = strict_schema(BatchSummary)["properties"]["memory_entry"]["properties"]["text"]
    assert entry == {"type": "string", "minLength": 1, "maxLength": 2000}
    queries = strict_schema(QueryPlan)["properties"]["queries"]
    assert (queries["minItems"], queries["maxItems"]) == (1, 20)
    assert queries["items"]["properties"]["query"]["minLength"] == 1


PIPELINE_MODELS: list[type[BaseModel]] = [
    IndividualAnalysis,
    BatchSummary,
    QueryPlan,
    RubricUpdateProposal,
]


@pytest.mark.parametrize("model", PIPELINE_MODELS, ids=lambda m: m.__name__)
def test_every_pipeline_string_and_list_is_bounded_in_the_strict_schema(
    model: type[BaseModel],
) -> None:
    # A constrained decoder then cannot run away inside a string or a list: the reply's
    # length is bounded by the schema, whatever max_tokens is.
    for node in _walk(strict_schema(model)):
        if node.get("type") == "string" and "enum" not in node:
            assert 0 < node["maxLength"] <= 2000, node
        if node.get("type") == "array":
            # 0: the list of a shape that has none (a detection's "no behaviour" shape)
            assert 0 <= node["maxItems"] <= 50, node


def _json_matcher(schema: dict[str, Any]) -> xgrammar.GrammarMatcher:
    """A grammar matcher of ``schema`` over a vocabulary of single ASCII characters (the
    real-model server's settings: strict JSON, no free whitespace)."""
    vocab = [chr(c) for c in range(32, 127)] + ["</s>"]
    info = xgrammar.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])
    grammar = xgrammar.GrammarCompiler(info).compile_json_schema(
        json.dumps(schema), any_whitespace=False
    )
    return xgrammar.GrammarMatcher(grammar)


def _decodable(schema: dict[str, Any], value: dict[str, Any]) -> bool:
    matcher = _json_matcher(schema)
    text = json.dumps(value, separators=(", ", ": "))
    return matcher.accept_string(text) and matcher.accept_token(95)  # then the stop token


def test_a_constrained_decoder_holds_the_bounds() -> None:
    # xgrammar (vLLM's grammar engine, and the real-model tier's) enforces maxLength and
    # maxItems: a reply one character or one item over cannot be decoded.
    schema = strict_schema(BatchSummary)
    base = BatchSummary.model_validate(
        {
            "executive_summary": {"summary": "Step 1.", "trend": "healthy"},
            "aggregated_reward_hacking": {"detected": False},
            "memory_entry": {"text": "Step 1: fine."},
        }
    ).model_dump(mode="json")
    assert _decodable(schema, base)

    def with_entry(text: str, keywords: list[str]) -> dict[str, Any]:
        return {**base, "memory_entry": {"text": text, "keywords": keywords}}

    assert _decodable(schema, with_entry("m" * 2000, ["k"] * 10))
    assert not _decodable(schema, with_entry("m" * 2001, []))
    assert not _decodable(schema, with_entry("m", ["k"] * 11))
    assert not _decodable(schema, with_entry("m", ["k" * 65]))


def test_a_constrained_decoder_writes_only_consistent_detections() -> None:
    # A detection without a behaviour, or behaviours without a detection, cannot be
    # decoded: a small model's "detected: true, behaviours: []" would be a re-ask per analysis.
    schema = strict_schema(IndividualAnalysis)
    base = IndividualAnalysis.model_validate(
        {
            "rollout_id": "r1",
            "overall_assessment": {"quality": "good"},
            "performance_at_stage": {"meets_expectations": True},
            "reward_hacking_analysis": {"detected": False, "severity": "none"},
            "rubric_evaluation": {"score_justified": True},
        }
    ).model_dump(mode="json")
    behaviour = {"tag": "hedging", "description": "d", "evidence": "e"}

    def with_hacking(behaviours: list[Any], detected: bool, severity: str) -> dict[str, Any]:
        hacking = {"behaviours": behaviours, "detected": detected, "severity": severity}
        return {**base, "reward_hacking_analysis": hacking}

    assert _decodable(schema, with_hacking([], False, "none"))
    assert _decodable(schema, with_hacking([behaviour], True, "medium"))
    assert not _decodable(schema, with_hacking([], True, "high"))
    assert not _decodable(schema, with_hacking([], False, "low"))
    assert not _decodable(schema, with_hacking([behaviour], False, "none"))
    assert not _decodable(schema, with_hacking([behaviour], True, "none"))


def test_scorer_schema_is_built_per_rubric() -> None:
    schema = verdicts_schema(("A1", "R1", "R2"))
    verdicts = schema["properties"]["verdicts"]
    assert verdicts["minItems"] == verdicts["maxItems"] == 3
    item = verdicts["items"]
    assert item["properties"]["id"] == {"type": "string", "enum": ["A1", "R1", "R2"]}
    assert item["properties"]["score"] == {"type": "integer", "enum": [0, 1, 2, 3, 4]}
    # The reason before the score: a constrained decoder writes properties in this order.
    assert list(item["properties"]) == item["required"] == ["id", "reason", "score"]
    assert (
        "enum"
        not in strict_schema(JudgeVerdicts)["properties"]["verdicts"]["items"]["properties"]["id"]
    )  # the cached model schema is not changed by a rubric's
    xgrammar.Grammar.from_json_schema(json.dumps(schema), strict_mode=True)


# -- what requests carry ---------------------------------------------------------------------------


async def test_requests_carry_the_strict_json_schema_by_default(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.push(Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("analyzer", MESSAGES, Verdict) == EXPECTED
    assert fake_llm.requests[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Verdict", "strict": True, "schema": strict_schema(Verdict)},
    }
    assert call_log(tmp_path)[0]["structured_output"] == "json_schema"


@pytest.mark.parametrize(
    ("setting", "sent"),
    [
        ("json_object", {"type": "json_object"}),
        ("none", None),
    ],
)
async def test_structured_output_setting_picks_the_mode(
    tmp_path: Path, fake_llm: FakeLLM, setting: str, sent: dict[str, Any] | None
) -> None:
    fake_llm.push(Reply(content=GOOD))
    async with open_gateway(
        tmp_path, fake_llm, **{"agents.default.structured_output": setting}
    ) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
        assert gateway.output_mode("scorer").mode == setting
    assert fake_llm.requests[0].get("response_format") == sent


def test_score_asks_for_the_rubrics_verdict_schema(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = llm_settings(
        tmp_path,
        fake_llm,
        adaptive_rubrics=[{"text": "The response explains its reasoning.", "weight": 0.5}],
    )
    with serve(settings) as client:
        rubric = client.get("/rubrics").json()
        ids = [c["id"] for c in [*rubric["anchors"], *rubric["adaptive"]]]
        assert client.post("/score", json=BODY).json()["status"] == "scored"
    response_format = fake_llm.requests[0]["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["schema"] == verdicts_schema(tuple(ids))


# -- the fallback ---------------------------------------------------------------------------------


async def test_refused_json_schema_falls_back_to_json_object_once_per_endpoint(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.refuse_formats.add("json_schema")
    fake_llm.push(Reply(content=GOOD), Reply(content=GOOD))
    with caplog.at_level(logging.WARNING, logger="amaris.llm"):
        async with open_gateway(tmp_path, fake_llm) as gateway:
            assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
            # Remembered for the endpoint and model, whichever agent asks next.
            assert await gateway.structured("analyzer", MESSAGES, Verdict) == EXPECTED
            state = gateway.output_mode("updater")
            stats = gateway.stats.copy()

    formats = [r.get("response_format", {}).get("type") for r in fake_llm.requests]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert state.mode == "json_object"
    assert "json_schema refused with 400" in state.reason
    assert stats["scorer.format_fallbacks"] == 1 and stats["scorer.errors"] == 0
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert sum("refused response_format" in r.message for r in caplog.records) == 1
    assert [r["outcome"] for r in call_log(tmp_path)] == ["format_refused", "ok", "ok"]


async def test_refused_json_object_falls_back_to_the_prompt_alone(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.refuse_formats.update({"json_schema", "json_object"})
    fake_llm.push(Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm, **{"gateway.max_attempts": 1}) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
        assert gateway.output_mode("scorer").mode == "none"
    formats = [r.get("response_format", {}).get("type") for r in fake_llm.requests]
    assert formats == ["json_schema", "json_object", None]


async def test_a_configured_mode_does_not_fall_back(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.refuse_formats.add("json_schema")
    async with open_gateway(
        tmp_path, fake_llm, **{"agents.default.structured_output": "json_schema"}
    ) as gateway:
        with pytest.raises(LLMUnavailableError, match="response_format"):
            await gateway.structured("scorer", MESSAGES, Verdict)
        assert gateway.output_mode("scorer").mode == "json_schema"
    assert len(fake_llm.requests) == 1


async def test_other_400s_do_not_fall_back(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(status=400, content="model 'x' does not exist"))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        with pytest.raises(LLMUnavailableError):
            await gateway.structured("scorer", MESSAGES, Verdict)
        assert gateway.output_mode("scorer").mode == "json_schema"
    assert len(fake_llm.requests) == 1


def test_healthz_shows_each_agents_mode_and_the_fallback(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.refuse_formats.add("json_schema")
    settings = llm_settings(
        tmp_path, fake_llm, **{"agents.query_generator.structured_output": "none"}
    )
    with serve(settings) as client:
        before = client.get("/healthz").json()["structured_output"]
        scored = client.post("/score", json=BODY)
        after = client.get("/healthz").json()["structured_output"]
    assert scored.status_code == 200 and scored.json()["status"] == "scored"
    assert set(before) == set(AGENTS)
    assert before["scorer"]["mode"] == "json_schema"
    assert before["query_generator"] == {
        "mode": "none",
        "reason": "configured (structured_output: none)",
    }
    for agent in ("scorer", "analyzer", "updater"):  # same endpoint and model
        assert after[agent]["mode"] == "json_object"
        assert "json_schema refused with 400" in after[agent]["reason"]
    assert after["query_generator"]["mode"] == "none"


def test_healthz_shows_the_offline_judge_sends_no_response_format(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        modes = client.get("/healthz").json()["structured_output"]
        assert client.post("/score", json=BODY).json()["status"] == "scored"
    assert {m["mode"] for m in modes.values()} == {"none"}
    assert "offline" in modes["scorer"]["reason"]
