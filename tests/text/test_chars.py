"""amaris.text.chars: ``spaced_words`` gives what its definition with ``str.translate`` gives
(with ``fold``: of the case-folded text), on every character, whether it replaces the changed
ones one by one or falls back."""

from __future__ import annotations

import pytest

from amaris.text.chars import MAX_REPLACED, WORDS_ONLY, spaced_words
from tests.support.degenerate import mixed


def _by_translate(text: str) -> str:
    return " ".join(text.translate(WORDS_ONLY).split())


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "Let's think: step-by-step!",
        "Let\u2019s \u2018quote\u2019 `code` don't",
        "\u89e3\u7b54\uff1a42\u3002",  # two CJK letters, a full-width colon, 42, a CJK full stop
        "a\u00a0b\u3000c\u2028d\x85e",  # spaces outside ASCII
        "cafe\u0301 na\u00efve \u00df",  # a combining mark stays
        "under_score \x1c\x1d tab\tnew\nline",
        "x\ud800y \udfff",  # lone surrogates, as JSON can carry them
        "emoji \U0001f600 ok",
        mixed(10_000),
    ],
)
def test_spaced_words_is_its_definition(text: str) -> None:
    assert spaced_words(text) == _by_translate(text)
    assert spaced_words(text, fold=True) == _by_translate(text.casefold())


def test_every_character_reads_as_its_definition() -> None:
    # Eight code points at a time (at most MAX_REPLACED changed: replaced one by one).
    for first in range(0, 0x30000, 8):
        block = "".join(chr(code) for code in range(first, first + 8))
        text = f"a{block}b {block}c"
        assert spaced_words(text) == _by_translate(text), hex(first)
        assert spaced_words(text, fold=True) == _by_translate(text.casefold()), hex(first)


@pytest.mark.parametrize("count", [MAX_REPLACED, MAX_REPLACED + 1, 3 * MAX_REPLACED])
def test_many_distinct_punctuation_marks_read_the_same(count: int) -> None:
    # U+2010... are dashes, quotes and other punctuation: all made spaces or dropped.
    marks = [chr(code) for code in range(0x2010, 0x2010 + count)]
    assert all(WORDS_ONLY[ord(mark)] != ord(mark) for mark in marks)
    text = "word".join(marks) * 3 + " \u00e9\u6f22"
    assert spaced_words(text) == _by_translate(text)
    assert spaced_words(text).startswith("word word")
    assert spaced_words(text, fold=True) == _by_translate(text.casefold())


@pytest.mark.parametrize(
    "text",
    [
        "\u00c9COLE \u1e9e STRASSE \u0130stanbul \u03a3\u0391\u03a3 \ufb01",  # folds to more chars
        "A" + " " * 100_000 + "B",  # one long run of spaces: halved until one
        " \t\n  lead and trail \x1f ",
        "\u00c9" * 3 + "\u2019" + "\u00e9",  # a folded letter beside a dropped apostrophe
    ],
)
def test_folding_in_the_same_pass_is_casefold_first(text: str) -> None:
    assert spaced_words(text, fold=True) == _by_translate(text.casefold())
