"""Output bounds fitted to the completion cap (amaris/llm/output_fit.py): the longest reply a
request's json_schema allows fits the agent's ``max_tokens``, so a constrained decoder
closes it before ``finish_reason: length``.

The longest reply is built from the schema sent (tests/support/output_tokens.py),
independently of the module's own estimate, and its tokens are counted on its text
(xgrammar's separators) with the documented conservative rate: every punctuation character
and space a token, runs of letters, digits and underscores at ``OUTPUT_CHARS_PER_TOKEN``
characters a token."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

import pytest
from pydantic import BaseModel

from amaris.agents import BatchSummary, IndividualAnalysis, QueryPlan, RubricUpdateProposal
from amaris.agents.schemas import BootstrapCandidates
from amaris.llm.output_fit import (
    MIN_STRING_CHARS,
    RESERVE_TOKENS,
    Fit,
    FittedSchemas,
    fit_schema,
    reply_budget,
    worst_case_tokens,
)
from amaris.llm.schema import strict_schema
from amaris.scoring.judge_protocol import verdicts_schema
from amaris.settings import Settings
from tests.support.no_deps import import_xgrammar
from tests.support.output_tokens import reply_tokens


def _at_most(model: type[BaseModel], field: str, limit: int) -> dict[str, Any]:
    schema = json.loads(json.dumps(strict_schema(model)))
    schema["properties"][field]["maxItems"] = limit
    return schema


DEFAULTS = Settings()
SCHEMAS: dict[str, dict[str, Any]] = {
    "scorer, 1 criterion": verdicts_schema(("A1",)),
    "scorer, 4 criteria": verdicts_schema(("A1", "A2", "C1", "C2")),
    "analyzer": strict_schema(IndividualAnalysis),
    "summarizer and meta_summarizer": strict_schema(BatchSummary),
    # the query plan and the update as tasks/ send them: their lists held per request
    "query_generator": _at_most(QueryPlan, "queries", 8),
    "updater": _at_most(
        RubricUpdateProposal, "rubric_modifications", DEFAULTS.pipeline.max_modifications
    ),
    "bootstrap": strict_schema(BootstrapCandidates),
}
CAPS = (640, 1024, 2048, 4096)


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_the_longest_reply_of_a_fitted_schema_fits_the_cap(name: str, cap: int) -> None:
    schema = SCHEMAS[name]
    fitted, fit = fit_schema(schema, cap)
    assert fit.fits
    assert reply_tokens(fitted) <= fit.after <= cap - RESERVE_TOKENS, (name, cap)
    assert worst_case_tokens(fitted) == fit.after <= cap - RESERVE_TOKENS
    assert _shape(fitted) == _shape(schema)


def _shape(node: Any) -> Any:
    """``node`` without its string and list bounds."""
    if isinstance(node, list):
        return [_shape(n) for n in node]
    if not isinstance(node, dict):
        return node
    return {k: _shape(v) for k, v in node.items() if k not in ("maxLength", "maxItems")}


@pytest.mark.parametrize("name", ["analyzer", "summarizer and meta_summarizer", "updater"])
def test_the_unfitted_schemas_allow_replies_far_over_the_caps(name: str) -> None:
    # What the fit is for: the agents' own bounds let a reply run to thousands of tokens.
    assert reply_tokens(SCHEMAS[name]) > max(CAPS)


def test_a_fitted_schema_keeps_the_agents_bounds_as_ceilings_and_floors() -> None:
    schema = SCHEMAS["analyzer"]
    fitted, fit = fit_schema(schema, 1024)
    assert 0 < fit.factor < 1
    summary = fitted["properties"]["overall_assessment"]["properties"]["summary"]
    gaps = fitted["properties"]["rubric_evaluation"]["properties"]["gaps"]
    hacking = fitted["properties"]["reward_hacking_analysis"]["anyOf"][0]  # behaviours listed
    tag = hacking["properties"]["behaviours"]["items"]
    assert MIN_STRING_CHARS <= summary["maxLength"] < 1000
    assert 1 <= gaps["maxItems"] < 5
    assert MIN_STRING_CHARS <= tag["properties"]["tag"]["maxLength"] <= 64
    # enumerations are never touched
    assert (
        fitted["properties"]["overall_assessment"]["properties"]["quality"]
        == (schema["properties"]["overall_assessment"]["properties"]["quality"])
    )
    # a roomy cap leaves the schema as it is (the same object)
    roomy, fit = fit_schema(schema, 100_000)
    assert roomy is schema and fit.factor == 1.0


def test_a_scorer_reason_without_a_bound_gets_one_from_the_cap() -> None:
    schema = SCHEMAS["scorer, 1 criterion"]
    assert "maxLength" not in schema["properties"]["verdicts"]["items"]["properties"]["reason"]
    assert worst_case_tokens(schema) == math.inf
    fitted, fit = fit_schema(schema, 192)
    assert fit.fits
    verdicts = fitted["properties"]["verdicts"]
    assert verdicts["minItems"] == verdicts["maxItems"] == 1  # one verdict per criterion
    assert 100 < verdicts["items"]["properties"]["reason"]["maxLength"] < 192 * 2.5
    assert reply_tokens(fitted) <= 192 - RESERVE_TOKENS


def test_a_cap_below_the_shortest_reply_leaves_the_schema_unchanged() -> None:
    schema = verdicts_schema(tuple(f"A{i}" for i in range(10)))
    fitted, fit = fit_schema(schema, 64)
    assert fitted is schema and not fit.fits
    assert fit.factor == 1.0  # unchanged
    # what the floors would take (the warning quotes it): over the cap, not unbounded
    assert fit.before == math.inf
    assert 64 - RESERVE_TOKENS < fit.after < math.inf


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        # docs/pipeline.md's estimate: a number 12 tokens, a bounded integer its digits
        ({"type": "number"}, 12),
        ({"type": "integer"}, 12),
        ({"type": "integer", "minimum": -5, "maximum": 100}, 3),
        ({"type": "integer", "exclusiveMinimum": -1000, "exclusiveMaximum": 9}, 5),
        ({"type": "number", "minimum": 0, "maximum": 1}, 12),
        # a schema read from JSON (its strings are not the literals here)
        (json.loads('{"type": "integer", "minimum": 0, "maximum": 100}'), 3),
        ({"type": ["integer", "null"], "minimum": 0, "maximum": 5}, 12),
        # true / false / null one token a character
        ({"type": "boolean"}, 5),
        ({"type": "null"}, 4),
        ({"const": True}, 4),
        ({"const": None}, 4),
        ({"const": 12.5}, 4),
        # free text at 2.5 characters a token, its quotes one each
        ({"type": "string", "maxLength": 25}, 2 + 10),
        ({"type": "string", "maxLength": 26}, 2 + 11),
        ({"const": "abcdef"}, 2 + 3),
        ({"enum": ["ab", "abcdef", "a"]}, 2 + 3),
        ({"enum": []}, 0),
        # a list: its brackets, maxItems of its item, a comma and a space between two
        ({"type": "array", "items": {"type": "boolean"}, "maxItems": 3}, 2 + 3 * 5 + 2 * 2),
        ({"type": "array", "items": {"type": "boolean"}, "maxItems": 1}, 2 + 5),
        ({"type": "array", "items": {"type": "boolean"}, "maxItems": 0}, 2),
        # an object: its braces, each property's quotes, colon and space, and its name
        (
            {
                "type": "object",
                "properties": {"abc": {"type": "null"}, "c": {"type": "boolean"}},
            },
            2 + 2 + (4 + 2 + 4) + (4 + 1 + 5),
        ),
        ({"type": "object", "properties": {}}, 2),
        ({"type": "object"}, 2),
        # the longest branch, the longest type
        ({"anyOf": [{"type": "null"}, {"type": "boolean"}]}, 5),
        ({"anyOf": []}, 0),
        ({"type": ["string", "null"], "maxLength": 5}, 4),
        ({"type": ["null", "boolean"]}, 5),
        # no known type: unbounded
        ({"type": "any"}, math.inf),
        ({"type": "uint8"}, math.inf),
        ({"type": "array"}, math.inf),
        ({}, math.inf),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, math.inf),
        (
            {"type": "array", "items": {"type": "null"}, "maxItems": 2, "prefixItems": []},
            2 + 2 * 4 + 2,
        ),
    ],
)
def test_the_estimate_counts_as_documented(node: dict[str, Any], expected: float) -> None:
    assert worst_case_tokens(node) == expected


def _two_strings(long: int, short: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": long},
            "b": {"type": "string", "maxLength": short},
        },
    }


def test_the_cap_less_8_tokens_is_the_reply_budget() -> None:
    schema = _two_strings(100, 20)
    worst = worst_case_tokens(schema)
    exact, fit = fit_schema(schema, int(worst) + 8)
    assert exact is schema and fit == Fit(1.0, worst, worst, True)  # a reply at the budget fits
    fitted, fit = fit_schema(schema, int(worst) + 7)
    assert fit.fits and fit.factor < 1 and fit.after <= worst - 1
    assert fitted["properties"]["a"]["maxLength"] < 100


def test_a_fitted_string_keeps_16_characters_or_its_own_bound() -> None:
    fitted, fit = fit_schema(_two_strings(1000, 20), 80)
    assert fit.fits and fit.factor < 16 / 20
    assert fitted["properties"]["b"]["maxLength"] == 16
    assert 16 < fitted["properties"]["a"]["maxLength"] < 1000
    short, _ = fit_schema(_two_strings(1000, 10), 80)
    assert short["properties"]["b"]["maxLength"] == 10
    floor = {**_two_strings(1000, 40), "required": ["a", "b"]}
    floor["properties"]["b"]["minLength"] = 30
    floored, _ = fit_schema(floor, 80)
    assert floored["properties"]["b"]["maxLength"] == 30
    none = {**_two_strings(1000, 0)}
    emptied, _ = fit_schema(none, 80)
    assert emptied["properties"]["b"]["maxLength"] == 0  # a string of at most nothing stays so


def test_the_fit_is_the_largest_that_fits() -> None:
    # b at its 16-character floor; a as long as the budget (80 - 8) allows: one character
    # more would not fit
    fitted, fit = fit_schema(_two_strings(1000, 20), 80)
    bigger = json.loads(json.dumps(fitted))
    bigger["properties"]["a"]["maxLength"] += 1
    assert worst_case_tokens(fitted) == fit.after <= 80 - 8 < worst_case_tokens(bigger)


def test_the_reply_budget_is_the_cap_less_8_never_negative() -> None:
    assert [reply_budget(n) for n in (0, 5, 8, 9, 640)] == [0, 0, 0, 1, 632]


def test_a_fitted_list_keeps_one_item_or_its_min_items() -> None:
    def listing(min_items: int) -> dict[str, Any]:
        item = {"type": "string", "maxLength": 40}
        return {"type": "array", "items": item, "maxItems": 50, "minItems": min_items}

    # an item at its floor: 2 + 16 / 2.5 tokens; a budget of 15 holds one, 22 holds two
    one, fit = fit_schema(listing(0), 8 + 15)
    assert fit.fits and one["maxItems"] == 1
    assert one["items"]["maxLength"] == 16
    two, _ = fit_schema(listing(2), 8 + 22)
    assert two["maxItems"] == 2
    assert worst_case_tokens(two) == 22
    # a list of at most no item stays so
    empty = {"type": "array", "items": {"type": "boolean"}, "maxItems": 0}
    schema = {"type": "object", "properties": {"a": empty, "b": listing(0)}}
    fitted, fit = fit_schema(schema, 8 + 40)
    assert fit.fits and fit.factor < 1
    assert fitted["properties"]["a"]["maxItems"] == 0


def test_fitted_schemas_fit_once_per_schema_object_and_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fits = FittedSchemas()
    schema = SCHEMAS["analyzer"]
    caplog.set_level(logging.INFO, logger="amaris.llm")
    first = fits.fitted("analyzer", "IndividualAnalysis", schema, 1024)
    assert first == fit_schema(schema, 1024)[0] != schema
    assert fits.fitted("analyzer", "IndividualAnalysis", schema, 1024) is first
    other_cap = fits.fitted("analyzer", "IndividualAnalysis", schema, 2048)
    assert other_cap == fit_schema(schema, 2048)[0] != first
    # another object with the same content is fitted anew (the cache holds objects)
    same = json.loads(json.dumps(schema))
    again = fits.fitted("analyzer", "IndividualAnalysis", same, 1024)
    assert again == first and again is not first
    # a roomy cap: the schema itself
    assert fits.fitted("analyzer", "IndividualAnalysis", schema, 100_000) is schema
    # the first fit of each agent, schema and cap is logged, once
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == [logging.INFO, logging.INFO]
    factor = fit_schema(schema, 1024)[1]
    assert messages[0][1] == (
        f"analyzer: schema IndividualAnalysis bounds fitted to max_tokens 1024 (factor "
        f"{factor.factor:.3f}; longest reply ~{factor.before:.0f} -> ~{factor.after:.0f} tokens)"
    )
    assert "max_tokens 2048" in messages[1][1]


def test_a_cap_too_small_is_warned_about_once_per_agent(caplog: pytest.LogCaptureFixture) -> None:
    fits = FittedSchemas()
    schema = verdicts_schema(tuple(f"A{i}" for i in range(10)))
    caplog.set_level(logging.INFO, logger="amaris.llm")
    # each an object of its own: fitted each time, warned about once per agent
    for agent in ("scorer", "scorer", "analyzer"):
        fresh = json.loads(json.dumps(schema))
        assert fits.fitted(agent, "verdicts", fresh, 64) is fresh
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    after = fit_schema(schema, 64)[1].after
    assert warnings == [
        f"{agent}: max_tokens 64 is below the shortest reply schema verdicts allows with its "
        f"bounds at their floors (~{after:.0f} tokens): replies may be cut (judge_truncated)"
        for agent in ("scorer", "analyzer")
    ]
    assert [r for r in caplog.records if r.levelno != logging.WARNING] == []


def test_the_fitted_schemas_kept_are_bounded() -> None:
    fits = FittedSchemas()
    schema = SCHEMAS["analyzer"]
    caps = range(600, 600 + 256)
    kept = [fits.fitted("analyzer", "a", schema, cap) for cap in caps]
    assert fits.fitted("analyzer", "a", schema, 600) is kept[0]  # 256 kept
    fits.fitted("analyzer", "a", schema, 600 + 256)  # one more: the cache starts again
    refitted = fits.fitted("analyzer", "a", schema, 600)
    assert refitted == kept[0] and refitted is not kept[0]


def test_every_fitted_schema_is_one_a_strict_decoder_compiles() -> None:
    # Last in the file: importing xgrammar takes seconds (its mutation run stops at the
    # first failing test, usually before this one).
    xgrammar = import_xgrammar()
    for schema in SCHEMAS.values():
        for cap in CAPS:
            fitted, _ = fit_schema(schema, cap)
            xgrammar.Grammar.from_json_schema(json.dumps(fitted), strict_mode=True)
