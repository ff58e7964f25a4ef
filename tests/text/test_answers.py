"""amaris.text.answers reads answers as Python's ``re`` spelling of its patterns would, on
their corner cases (Unicode word boundaries, commas before four digits, alternatives)."""

from __future__ import annotations

import pytest

from amaris.text.answers import (
    ANSWER_WINDOW,
    boxed_contents,
    canonical_number,
    extract_final_answer,
    find_candidate_answers,
    strip_latex,
)
from tests.support.degenerate import mixed


@pytest.mark.parametrize(
    ("text", "final", "candidates"),
    [
        # A comma before four digits ends a number; the digits after it are one.
        ("The total is 1,0002", "2", []),
        ("So 1,234,5678 units", "5678", []),
        ("It is 3 or 4.51,0001.", "1", ["3", "4.51"]),
        # A letter outside ASCII next to "answer" is no word boundary (Python's \b).
        ("éAnswer: 5. The answer is 7", "7", ["7"]),
        ("answeré is 3, so 9", "9", []),
        ("The answer is not 4, the answer is 5.", "5", ["5"]),
        ("Is it 4 or 5? It is 4 or 6.", "6", ["4", "6"]),
        ("= 7 .", "7", []),
        ("x = 3/4.", "0.75", []),
    ],
)
def test_corner_cases_read_like_python_re(text: str, final: str, candidates: list[str]) -> None:
    assert extract_final_answer(text) == final
    assert find_candidate_answers(text) == candidates


def test_only_the_tail_is_read() -> None:
    head = "\\boxed{7} "
    filler = "word " * (ANSWER_WINDOW // 5)
    assert extract_final_answer(head + filler) != "7"
    assert extract_final_answer(head + filler[: ANSWER_WINDOW // 2]) == "7"


def test_a_repeated_box_segment_or_list_offers_what_one_copy_offers() -> None:
    once = "\\boxed{4} The answer is 42. It is 1, 2, or 3. \\boxed{5} "
    assert find_candidate_answers(once) == ["4", "5", "42", "1", "2", "3"]
    assert find_candidate_answers(once * 20) == ["4", "5", "42", "1", "2", "3"]


def test_a_list_first_asked_then_stated_is_a_candidate() -> None:
    # A list read once: not the one in the question, which offers nothing.
    assert find_candidate_answers("Is it 4 or 5? It is 4 or 5.") == ["4", "5"]
    assert find_candidate_answers("It is 4 or 5. Is it 4 or 5?") == ["4", "5"]


def test_the_answers_of_a_100_kb_loop_are_those_of_its_tail() -> None:
    text = mixed(100_000)
    tail = text[-ANSWER_WINDOW:]
    candidates = ["4", "42", "1", "2", "3"]
    assert find_candidate_answers(text) == find_candidate_answers(tail) == candidates
    assert extract_final_answer(text) == extract_final_answer(tail) == "4"


@pytest.mark.parametrize(
    ("token", "value"),
    [
        ("42", "42"),
        ("-0", "0"),
        ("007", "7"),
        ("1,000", "1000"),
        ("-1,234", "-1234"),
        ("\u0663", "3"),  # ARABIC-INDIC DIGIT THREE
        ("+5", "5"),
        ("4.0", "4"),
        ("12.50", "12.5"),
        ("0.10", "0.1"),
        ("8/2", "4"),
        ("1/3", "1/3"),
        ("3/0", None),
        ("", None),
        ("-", None),
        ("1" * 5_000, None),  # past Python's limit on the digits of an int
    ],
)
def test_canonical_numbers(token: str, value: str | None) -> None:
    assert canonical_number(token) == value


def test_braces_pair_up_around_boxes_and_wrappers() -> None:
    text = "} \\boxed{a{b}c} } \\boxed {x} \\boxed{open"
    assert boxed_contents(text) == ["a{b}c", "x"]
    # A wrapper whose content holds a brace stays; a stray "}" closes nothing.
    latex = "\\boxed{\\text{4}} and \\text{a{b}} } {\\mbox{y}}"
    assert strip_latex(latex) == "4 and \\text{a{b}} } {y}"
    assert strip_latex("{\\text{a}}{b}") == "{a}{b}"
    assert boxed_contents("\\boxed{\\boxed{4") == []  # nothing closed
    assert strip_latex("\\boxed{\\text{4") == "\\boxed{\\text{4"
