"""The response in an OpenRLHF query (``amaris.text.prompt_split``), without the server:
the prompt found as it is, after a BOS token, cut to its tail, or as a tokenizer decoded it.

The decoded queries below are what all-MiniLM-L6-v2's WordPiece tokenizer
(tests/support/trainer_env.py) decodes for these prompts and responses; the OpenRLHF
contract test runs the tokenizer itself. Needs no conftest fixture (``--noconftest``).
"""

from __future__ import annotations

import random

import pytest

from amaris.text.prompt_split import MIN_PROMPT_TAIL, _overlap, folded, response_of
from tests.support.watchdog import finishes


@pytest.mark.parametrize(
    ("query", "prompt", "response"),
    [
        ("What is 2+2? 4", "What is 2+2?", " 4"),
        ("<s>What is 2+2? 4", "What is 2+2?", " 4"),
        ("What is 2+2?", "What is 2+2?", ""),
        ("anything", "", "anything"),
        ("prefix What is 2+2?What is 2+2? 4", "What is 2+2?", "What is 2+2? 4"),
        # cut to its tail (16+ characters), the cut character decoded as U+FFFD
        ("\ufffd\ufffdbcdefghijklmnopq 4", "abcdefghijklmnopq", " 4"),
        ("bcdefghijklmnopq 4", "abcdefghijklmnopq", " 4"),
        ("cdefghijklmnopq 4", "abcdefghijklmnopq", None),
        ("no prompt here", "What is 2+2?", None),
    ],
)
def test_the_prompt_as_it_is(query: str, prompt: str, response: str | None) -> None:
    assert response_of(query, prompt) == response


QUESTION = "What is 6 * 7? Answer with the number."


@pytest.mark.parametrize(
    ("query", "prompt", "response"),
    [
        # WordPiece: lower-cased, punctuation spaced out, a space before the response
        (
            "what is 6 * 7? answer with the number. the answer is 42.",
            QUESTION,
            "the answer is 42.",
        ),
        ("don ' t panic. it is fine", "Don't panic.", "it is fine"),
        ("[CLS] what is 6 * 7? answer with the number. 42", QUESTION, "42"),
        # accents stripped, compatibility forms, sharp s, full width
        ("cafe naive resume : yes", "Café naïve résumé:", "yes"),
        ("fine : ok", "\ufb01ne:", "ok"),
        ("strasse? ja", "Straße?", "ja"),
        ("abc! done", "\uff21\uff42\uff43!", "done"),
        # control and format characters, tabs, a zero-width space, U+FFFD: set aside
        ("ab cd x", "a\u200bb\x00\tc\ufffdd", "x"),
        # between the prompt and the response: spaces and marks are not the response
        ("cafe\u0301 \u200b x", "Cafe", "x"),
        ("what is it?", "What is it?  ", ""),
        # a whitespace-only prompt: the response is the query from its first character
        ("  the answer", "   ", "the answer"),
        # the tail of a cut prompt, from its first letter or digit (## and ? skipped)
        (
            "##ing with the number. the answer is 42.",
            "Say something with the number.",
            "the answer is 42.",
        ),
        ("? answer with the number. the answer is 42.", QUESTION, "the answer is 42."),
        ("\ufffd answer with the number. 42", QUESTION, "42"),
        # a query ending with the prompt's tail: no response
        ("answer with the number.", QUESTION, ""),
        # still not the prompt: a character the tokenizer does not know, a different text
        ("what is [UNK]? answer", "What is 😀?", None),
        ("the answer is 42.", QUESTION, None),
        ("With the number. 42", QUESTION, None),  # its tail: 14 characters folded
        ("!!!", QUESTION, None),
        # past 256 characters: the end of the folded prompt is compared by value
        ("a" * 300, "A" * 300, ""),
    ],
)
def test_the_prompt_as_a_tokenizer_decoded_it(query: str, prompt: str, response: str) -> None:
    assert response_of(query, prompt) == response


def test_folded_keeps_where_each_character_came_from() -> None:
    assert folded("") == ("", [])
    assert folded("A b\u0301\ufffd\x00C") == ("abc", [0, 2, 6])
    assert folded("ß\ufb01") == ("ssfi", [0, 0, 1, 1])
    assert folded("\uff21\u00a0\u2028é") == ("ae", [0, 3])
    # characters past U+FFFD (emoji, astral planes) are kept: only U+FFFD itself goes
    assert folded("Ok \U0001f600\U0001f44d") == ("ok\U0001f600\U0001f44d", [0, 1, 3, 4])


def reference(query: str, prompt: str) -> str | None:
    """The definition, by brute force: the prompt as it is (whole, anywhere, or its longest
    tail of 16+ characters after U+FFFD), else the same on the folded texts, the response
    from the query's character after the folded prompt's end."""
    start = len(query) - len(query.lstrip("\ufffd"))
    if query.startswith(prompt):
        return query[len(prompt) :]
    if prompt and prompt in query:
        return query[query.index(prompt) + len(prompt) :]
    for tail in range(len(prompt), MIN_PROMPT_TAIL - 1, -1):
        if query.startswith(prompt[len(prompt) - tail :], start):
            return query[start + tail :]
    fq, starts = folded(query)
    fp, _ = folded(prompt)
    end: int | None = None
    if fq.startswith(fp):
        end = len(fp)
    elif fp and fp in fq:
        end = fq.index(fp) + len(fp)
    else:
        first = next((i for i, c in enumerate(fq) if c.isalnum()), len(fq))
        for tail in range(len(fp), MIN_PROMPT_TAIL - 1, -1):
            if fq.startswith(fp[len(fp) - tail :], first):
                end = first + tail
                break
    if end is None:
        return None
    return query[starts[end] :] if end < len(starts) else ""


@pytest.mark.parametrize("alphabet", ["ab", "abc", "aAb B.", "aá b\ufffd"])
def test_the_search_agrees_with_its_definition(alphabet: str) -> None:
    rng = random.Random(26)
    for trial in range(400):
        prompt = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        cut = rng.randint(0, len(prompt))
        response = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
        query = ("\ufffd" if trial % 5 == 0 else "") + prompt[cut:] + response
        if trial % 3 == 0:
            query = query.lower().replace(".", " . ")
        assert response_of(query, prompt) == reference(query, prompt), (query, prompt)


@pytest.mark.parametrize(
    ("prompt", "query", "response"),
    [
        # folded only: the tail's first characters occur everywhere in the prompt
        ("A" * 50_000, "a" * MIN_PROMPT_TAIL + "b", "b"),
        ("A" * 50_000, "a" * 49_999 + "b", "b"),
        ("Ab" * 25_000, "ba" * 10_000 + "c", "ac"),
        ("Ab" * 25_000, "aa" * 10_000 + "c", None),
        # as it is
        ("a" * 50_000, "a" * 49_999 + "b", "b"),
        ("ab" * 25_000, "ba" * 10_000 + "c", "ac"),
        # a long query continuing a 16-character tail of a 1.5M-character prompt: the
        # search tries every place the tail could start (each a copy of the prompt's rest,
        # ~1e12 bytes in all) unless its budget hands it to Knuth-Morris-Pratt
        ("a" * 1_500_000, "a" * MIN_PROMPT_TAIL + "b" * 400_000, "b" * 400_000),
    ],
    ids=[
        "folded-short",
        "folded-long",
        "folded-shifted",
        "folded-absent",
        "long",
        "shifted",
        "long-query-short-tail",
    ],
)
def test_a_repetitive_prompt_is_found_in_linear_time(
    prompt: str, query: str, response: str | None
) -> None:
    assert finishes(lambda: response_of(query, prompt)) == response


def longest_prefix_ending(text: str, pattern: str) -> int | None:
    """The definition, by brute force: the longest prefix (16+ characters) of ``pattern``
    that ``text`` ends with."""
    lengths = [n for n in range(MIN_PROMPT_TAIL, len(pattern) + 1) if text.endswith(pattern[:n])]
    return max(lengths) if lengths else None


def runs(x: str, y: str) -> list[tuple[str, str]]:
    """Texts and patterns made of runs of ``x`` and ``y``, where a wrong failure link or a
    character matched by order instead of equality shows: a run after another character, a
    run then a mismatch, a run the pattern starts one character off, two runs."""
    cases = [
        (x + y * 16, x + y * 15 + x),
        (x * 16 + y + x, x * 16 + y + y),
        (y * 16, x + y * 15),
        (x * 15 + y + x * 15 + y, x * 15 + y + x * 16),
    ]
    return cases + [(x * r + y + x * (r + 1) + y, x * r + y + x * (r + 2)) for r in (15, 16)]


@pytest.mark.parametrize(
    ("x", "y"),
    # both orders of two characters; and two past Latin-1, each of which Python makes a new
    # string object when indexed (Latin-1 characters are one cached object each)
    [("a", "b"), ("b", "a"), ("\u03b1", "\u03b2"), ("\u03b2", "\u03b1")],
)
def test_the_overlap_of_runs_agrees_with_its_definition(x: str, y: str) -> None:
    for text, pattern in runs(x, y):
        assert _overlap(text, pattern) == longest_prefix_ending(text, pattern), (text, pattern)


def test_the_overlap_agrees_with_its_definition() -> None:
    """Knuth-Morris-Pratt (the search of a repetitive prompt) against brute force: the
    longest prefix (16+ characters) of ``pattern`` that ``text`` ends with."""
    rng = random.Random(2026)
    for trial in range(600):
        alphabet = "abcd"[: 2 + trial % 3]
        shared = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) + shared
        pattern = shared + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        pattern = pattern[: len(text)]  # never longer than the text, as the search asks
        assert _overlap(text, pattern) == longest_prefix_ending(text, pattern), (text, pattern)
    assert _overlap("abc", "") is None
