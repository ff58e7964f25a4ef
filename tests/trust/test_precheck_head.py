"""The pre-check settles a long reply from its start (amaris/trust/precheck.py,
``HEAD_CHARS``): the same answer as normalising it whole, without reading 100 KB when its
first words already say it is neither an opener nor the prompt's echo. Fixture-free
(``--noconftest``), like test_precheck_unit.py.

The oracle: with a ``learned`` hook that finds nothing, :func:`degenerate` normalises the
reply and the prompt whole (the rules need them)."""

from __future__ import annotations

import random
import unicodedata

import pytest
import re2

from amaris.trust import precheck
from amaris.trust.precheck import (
    _ITEM_WORDS,
    _SEQUENCE,
    HEAD_CHARS,
    Degenerate,
    _normalised_head,
    degenerate,
    normalise,
)
from tests.support.degenerate import FAMILIES, QUESTION, REFERENCE, SIZES
from tests.support.master_keys import MASTER_KEYS, PROMPT

_SPELLED_OPENER = (
    r"(?:(?:ok|okay|sure|alright|well|so|now) )?"
    r"(?:lets|let us|i will|ill|we will|well|i shall|we shall|i am going to|im going to"
    r"|we are going to|were going to|i need to|we need to|first)"
    r" (?:solve|think|work|go|break|tackle|approach|figure|reason|analy[sz]e|look|start"
    r"|begin|compute|calculate|find|answer|do|carefully solve|carefully think)"
    r"(?: (?:about|through|out|down|at|on|with|into|over|it out))?"
    r"(?: (?:this|it|that|the|a|our|each))?"
    r"(?: (?:problem|question|task|one|math problem|equation|exercise|step|steps))?"
    r"(?: (?:carefully|step by step|systematically|together|first|now|one step at a time))?"
)
"""The opener pattern spelled out as one regex, independently of its listed slots."""

_WORDS = (
    *sorted(_ITEM_WORDS),
    *("What", "is", "6", "*", "7?", "Question:", "Q", "task", "Let's", "STEP", "Stra\u00dfe"),
    *("\u00e9", "e\u0301", "\u0301", "\u6f22\u5b57", "42", "answer", ":", "...", "\u00a0"),
    *("\u3000", "\u2028", "\u01c5", "\u0130", "\ufdfa", "x", "'", "\ufb01", "\u03a3", "1"),
)
"""Words of openers and labels, and others: case, width, ligatures, combining marks."""
_SEPARATORS = (" ", "  ", "\n", ". ", ", ", "", "\t", " \u0301", "\u0301 ", "\u200b", " \n")
_PROMPTS = ("What is 6 * 7?", "task", "Question 3: name the capital", "???", "", "lets think")


def _text(rng: random.Random, words: int) -> str:
    return "".join(rng.choice(_WORDS) + rng.choice(_SEPARATORS) for _ in range(words))


def _whole(reply: str, prompt: str, reference: str | None = None) -> Degenerate | None:
    """The pre-check normalising both texts whole: a learned hook that finds nothing."""
    return degenerate(reply, prompt, reference, learned=lambda norm, prompt: None)


def _cases(seed: int, count: int) -> list[tuple[str, str, str | None]]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        prompt = rng.choice([*_PROMPTS, _text(rng, rng.choice([1, 5, 300, 1_200]))])
        reply = _text(rng, rng.choice([1, 10, 200, 400, 1_500]))
        if rng.random() < 0.3:  # the prompt echoed (labelled or not), then more or openers
            label = rng.choice(["", "Question: ", "Q ", "task ", "problem\n"])
            after = rng.choice([reply, "", "Let's think step by step.", "Solution:"])
            reply = f"{label}{prompt}{rng.choice(_SEPARATORS)}{after}"
        cases.append((reply, prompt, rng.choice([None, REFERENCE, reply[:20]])))
    return cases


@pytest.mark.parametrize("seed", range(4))
def test_random_replies_get_what_the_whole_texts_give(seed: int) -> None:
    cases = _cases(seed, 250)
    assert sum(len(reply.strip()) > HEAD_CHARS for reply, _, _ in cases) > 100
    kinds = set()
    for reply, prompt, reference in cases:
        found = degenerate(reply, prompt, reference)
        assert found == _whole(reply, prompt, reference), (reply[:200], prompt[:80])
        kinds.add(found.kind if found else None)
    assert {None, "opener", "prompt_echo"} <= kinds  # both outcomes are exercised


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("size", SIZES)
def test_the_degenerate_families_get_what_the_whole_texts_give(family: str, size: int) -> None:
    text = FAMILIES[family](size)
    for reply, prompt in ((text, QUESTION), ("The answer is 42.", text), (text, text)):
        assert degenerate(reply, prompt, REFERENCE) == _whole(reply, prompt, REFERENCE)
        echoed = f"Question: {prompt} Let's think step by step."
        assert degenerate(echoed, prompt) == _whole(echoed, prompt)


@pytest.mark.parametrize("key", MASTER_KEYS)
def test_a_master_key_repeated_past_the_head_is_still_found(key: str) -> None:
    long = (key + " ") * (2 * HEAD_CHARS // max(1, len(key)) + 1)
    assert degenerate(long, PROMPT) == _whole(long, PROMPT)
    assert degenerate(long + " 42", PROMPT) == _whole(long + " 42", PROMPT)


def test_an_opener_repeated_past_the_head_then_content_is_read_whole() -> None:
    opener = "Let's think step by step. " * 200
    assert degenerate(opener, QUESTION) == Degenerate(
        "opener", f"only a reasoning opener or answer label: {opener[:40] + '...'!r}"
    )
    assert degenerate(opener + "The answer is 42.", QUESTION) is None
    echo = f"Question: {QUESTION} " * 100
    assert degenerate(echo, QUESTION) is None  # the prompt twice is more than its echo
    assert _whole(echo, QUESTION) is None


def test_a_long_reply_is_normalised_from_its_start_only_when_that_settles_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[int] = []

    def counted(text: str) -> str:
        read.append(len(text))
        return normalise(text)

    monkeypatch.setattr(precheck, "normalise", counted)
    prose = "To find 6 * 7, add six sevens: 7 + 7 = 14, 14 + 7 = 21, and so on. " * 1_500
    for reply in (FAMILIES["mixed"](100_000), prose):
        read.clear()
        assert degenerate(reply, QUESTION, REFERENCE) is None
        assert max(read) <= 2 * HEAD_CHARS  # the head only, not all of it
    read.clear()  # a long prompt is read as far as the comparison with the reply goes
    assert degenerate("The answer is 42.", FAMILIES["mixed"](100_000), REFERENCE) is None
    assert max(read) <= 2 * HEAD_CHARS
    read.clear()  # rules in force read both whole (they match the whole normalised text)
    assert degenerate(FAMILIES["mixed"](100_000), QUESTION, learned=lambda n, p: None) is None
    assert max(read) == 100_000


def test_a_normalised_head_is_the_start_of_the_normalised_text() -> None:
    rng = random.Random(5)
    for _ in range(400):
        text = _text(rng, rng.choice([5, 50, 400]))
        chars = rng.randrange(0, len(text) + 2)
        head, whole = _normalised_head(text, chars)
        norm = normalise(text)
        if whole:
            assert head == norm
        else:
            assert norm.startswith(head)
            assert norm[len(head) : len(head) + 1] in ("", " ") or not head


def test_the_sequence_pattern_matches_the_spelled_out_opener() -> None:
    labels = "|".join(re2.escape(label) for label in precheck._LABELS)
    item = rf"(?:{_SPELLED_OPENER}|{labels})"
    spelled = re2.compile(rf"{item}(?: {item})*")
    rng = random.Random(9)
    words = [*sorted(_ITEM_WORDS), "analyse", "analyze", "analysze", "x", "42"]
    matched = 0
    for _ in range(20_000):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        new = _SEQUENCE.fullmatch(text) is not None
        assert new == (spelled.fullmatch(text) is not None), text
        matched += new
        assert not new or all(word in _ITEM_WORDS for word in text.split())
    assert matched > 1_000


def test_no_character_composes_with_a_space_or_line_feed_after_it() -> None:
    # Why a cut before one keeps NFKC whole (_normalised_head), on every code point.
    for code in (*range(0xD800), *range(0xE000, 0x110000)):
        char = chr(code)
        norm = unicodedata.normalize("NFKC", char)
        assert unicodedata.normalize("NFKC", char + " ") == norm + " "
        assert unicodedata.normalize("NFKC", char + "\n") == norm + "\n"


def test_a_prompt_whose_head_has_no_word_is_still_echo_checked_whole() -> None:
    # The prompt's first ~1,000 characters normalise to nothing: an empty head is no
    # evidence that there is nothing to echo; the rest of the prompt is the question.
    question = "What is the capital of France? Explain briefly. " * 40  # past the head
    prompt = "-" * (2 * HEAD_CHARS) + " " + question
    reply = question
    found = degenerate(reply, prompt, None)
    assert found is not None and found.kind == "prompt_echo"


def test_an_opener_needs_its_subject() -> None:
    # "lets", "i will"... before the verb: a bare verb phrase is a reply the judge reads.
    assert degenerate("Think carefully.", PROMPT, None) is None
    assert degenerate("Solve this problem step by step.", PROMPT, None) is None
    found = degenerate("Let's solve this problem step by step.", PROMPT, None)
    assert found is not None and found.kind == "opener"
