"""Reading a model's answer (amaris/llm/json_reply.py), fixture-free (``--noconftest``: the
mutation run of ``json_reply``): strict parsing, the repair and its bounds, the
inline bound, lone surrogates made storable at any depth, keys too, and the schema and
check of :func:`read_reply` and :func:`read_inline`. tests/llm/test_gateway.py and
tests/api/test_judge_replies.py read replies through the gateway and the app."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from amaris.llm.json_reply import (
    INLINE_PARSE_CHARS,
    REPAIR_MAX_CHARS,
    parse_json_object,
    read_inline,
    read_reply,
    strict_json_object,
)

LONE = '"\\ud800"'
"""A lone surrogate as JSON writes it: ``json.loads`` decodes it to ``"\\ud800"``."""


def padded(size: int) -> str:
    """A JSON object of exactly ``size`` characters."""
    text = '{"a": ""}'
    return text[:-2] + "x" * (size - len(text)) + text[-2:]


def test_exactly_one_object_is_read_strictly() -> None:
    assert strict_json_object('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert strict_json_object('{"a": "é ✓"}') == {"a": "é ✓"}
    for text in ("[1]", "42", '"x"', "null", "", "{'a': 1}", '{"a": 1} {"b": 2}'):
        assert strict_json_object(text) is None, text


def test_a_reply_nesting_too_deep_is_an_invalid_output() -> None:
    with pytest.raises(ValueError, match=r"^output nests too deep to parse$"):
        strict_json_object("[" * 100_000 + "]" * 100_000)
    # nesting the parser reads, then a stray character: json_repair refuses the depth
    # (its own ValueError), one more invalid output, not an error of the request
    with pytest.raises(ValueError) as caught:
        parse_json_object("[" * 900 + "x")
    assert str(caught.value) == "output is not a JSON object (ValueError in repair)"
    assert isinstance(caught.value.__cause__, ValueError)


def test_lone_surrogates_are_replaced_in_values_and_keys_at_any_depth() -> None:
    text = f'{{{LONE}: {{"b": [{LONE}, [{LONE}, 1], {{"c": {LONE}}}]}}, "d": "ok"}}'
    expected = {"\ufffd": {"b": ["\ufffd", ["\ufffd", 1], {"c": "\ufffd"}]}, "d": "ok"}
    assert strict_json_object(text) == expected
    assert parse_json_object(text) == (expected, False)
    # a pair of escapes is one character, kept
    assert strict_json_object('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}
    # the repair's answer is made storable too
    assert parse_json_object(f'{{"a": [{LONE}, {{{LONE}: {LONE}}}],}}') == (
        {"a": ["\ufffd", {"\ufffd": "\ufffd"}]},
        True,
    )


def test_an_empty_object_is_read_strictly_but_not_repaired_into_one() -> None:
    assert parse_json_object(" {} ") == ({}, False)
    for text in ("{", "{,}", "not json", "[1, 2]"):
        with pytest.raises(ValueError, match=r"^output is not a JSON object$"):
            parse_json_object(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1,}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('Here: {"a": "x"} done', {"a": "x"}),
        ('{"a": [1, 2', {"a": [1, 2]}),
    ],
)
def test_a_nearly_json_reply_is_repaired(text: str, expected: dict[str, Any]) -> None:
    assert parse_json_object(f"\n {text} \n") == (expected, True)


def test_the_repair_bound_is_on_the_stripped_reply() -> None:
    assert REPAIR_MAX_CHARS == 65_536  # the bound in characters, as documented
    at_bound = "{'a': '" + "x" * (REPAIR_MAX_CHARS - 10) + "'}"
    assert len(at_bound) == REPAIR_MAX_CHARS - 1
    value, repaired = parse_json_object(" " * 100 + at_bound + "x" + " " * 100)
    assert repaired and isinstance(value, dict)
    over = at_bound + "xx"
    with pytest.raises(ValueError) as caught:
        parse_json_object(over)
    assert str(caught.value) == (
        f"output is not a JSON object, and too long to repair ({REPAIR_MAX_CHARS + 1} "
        f"characters; the limit is {REPAIR_MAX_CHARS})"
    )
    # strict JSON of any length is read, no repair needed
    assert parse_json_object(padded(REPAIR_MAX_CHARS * 2)) == (
        {"a": "x" * (REPAIR_MAX_CHARS * 2 - 9)},
        False,
    )


class A(BaseModel):
    a: Any


def test_a_short_answer_is_read_inline_a_long_one_is_left_to_a_thread() -> None:
    assert INLINE_PARSE_CHARS == 16_384  # the bound in characters, as documented
    assert read_inline(padded(16_384), A, None) == (A(a="x" * (16_384 - 9)), False)
    assert read_inline(padded(16_385), A, None) is None
    assert read_inline(' {"a": 1}\n', A, None) == (A(a=1), False)
    assert read_inline('{"a": 1,}', A, None) is None  # not strict JSON: repaired off the loop
    too_deep = "[" * 10_000 + "]" * 6_000
    assert read_inline(too_deep, A, None) is None  # too deep: not an error here
    assert read_inline(f'{{"a": {LONE}}}', A, None) == (A(a="\ufffd"), False)


class Reply(BaseModel):
    score: int
    reason: str = ""


def test_read_reply_validates_by_the_schema_and_the_check() -> None:
    checked: list[Reply] = []
    assert read_reply('{"score": 3}', Reply, checked.append) == (Reply(score=3), False)
    assert checked == [Reply(score=3)]
    assert read_reply('{"score": 2,}', Reply, None) == (Reply(score=2), True)
    with pytest.raises(ValidationError):
        read_reply('{"score": "high"}', Reply, None)

    def refuse(reply: Reply) -> None:
        raise ValueError(f"score {reply.score} refused")

    with pytest.raises(ValueError, match=r"^score 4 refused$"):
        read_reply('{"score": 4}', Reply, refuse)


def test_read_inline_validates_by_the_schema_and_the_check() -> None:
    # the object read on the loop is validated there, by the schema and the check
    checked: list[Reply] = []
    assert read_inline('{"score": 1, "reason": "r"}', Reply, checked.append) == (
        Reply(score=1, reason="r"),
        False,
    )
    assert checked == [Reply(score=1, reason="r")]
    with pytest.raises(ValidationError):
        read_inline('{"score": "high"}', Reply, None)

    def refuse(reply: Reply) -> None:
        raise ValueError(f"score {reply.score} refused")

    with pytest.raises(ValueError, match=r"^score 4 refused$"):
        read_inline('{"score": 4}', Reply, refuse)
    # what is not strict JSON is left to read_reply (off the loop), not refused here
    assert read_inline("not json", Reply, None) is None
    with pytest.raises(ValueError, match=r"^output is not a JSON object$"):
        read_reply("not json", Reply, None)
