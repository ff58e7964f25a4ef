"""The master-key pre-check (amaris/trust/precheck.py) at its functions, fixture-free
(``--noconftest``: the mutation run of ``precheck``). Every kind with its exact
detail, the reference exemption, the prompt echo with and without a label, the learned
rules' hook; tests/trust/test_precheck.py walks the same check through the app."""

from __future__ import annotations

import pytest

from amaris.trust.precheck import Degenerate, degenerate, normalise
from tests.support.master_keys import MASTER_KEYS, PROMPT, REFERENCE, SHORT_ANSWERS

PROMPT_TEXT = "What is 6 * 7?"


def found(reply: str, prompt: str = PROMPT_TEXT, reference: str | None = None) -> Degenerate:
    result = degenerate(reply, prompt, reference)
    assert result is not None, reply
    return result


@pytest.mark.parametrize("reply", MASTER_KEYS)
def test_every_master_key_is_degenerate(reply: str) -> None:
    assert degenerate(reply, PROMPT, REFERENCE) is not None


@pytest.mark.parametrize("reply", SHORT_ANSWERS)
def test_short_answers_are_not_degenerate(reply: str) -> None:
    assert degenerate(reply, PROMPT, REFERENCE) is None
    assert degenerate(reply, PROMPT) is None


def test_an_empty_reply_says_how_much_whitespace_it_had() -> None:
    assert found("") == Degenerate("empty", "empty")
    assert found(" \n\t ") == Degenerate("empty", "4 whitespace characters")
    assert found(" ").reason() == "degenerate_reply: empty (1 whitespace characters)"


def test_no_content_quotes_the_reply_cut_at_40_characters() -> None:
    assert found(" :: ") == Degenerate("no_content", "no letter or digit: '::'")
    forty, more = "-" * 40, "-" * 41
    assert found(forty).detail == f"no letter or digit: {forty!r}"
    assert found(more).detail == f"no letter or digit: {(forty + '...')!r}"
    assert found("?!").reason() == "degenerate_reply: no_content (no letter or digit: '?!')"


@pytest.mark.parametrize(
    "reply",
    [
        "Solution",
        "**Answer:**",
        "Let's solve this problem step by step.",
        "Thought process: Step 1: Solution:",
        "OK, let us think about it. The answer is",
        "解答\uff1a",
        "Respuesta",
    ],
)
def test_openers_and_labels_alone_are_degenerate(reply: str) -> None:
    shown = reply.strip()
    assert found(reply) == Degenerate(
        "opener", f"only a reasoning opener or answer label: {shown[:40]!r}"
    )


def test_an_opener_followed_by_content_is_not_degenerate() -> None:
    assert degenerate("Solution: 42", PROMPT_TEXT) is None
    assert degenerate("Let's think step by step. 6 * 7 = 42", PROMPT_TEXT) is None
    assert degenerate("Answer Paris", PROMPT_TEXT) is None


@pytest.mark.parametrize(
    "reply",
    [
        PROMPT_TEXT,
        "what is 6*7",
        "Question: What is 6 * 7?",
        "Problem - what is 6 * 7",
        "What is 6 * 7? Solution:",
        "Q: What is 6 * 7? Let's think step by step.",
    ],
)
def test_the_prompt_repeated_is_an_echo(reply: str) -> None:
    assert found(reply) == Degenerate("prompt_echo", "the prompt repeated, nothing else")


def test_the_prompt_with_more_after_it_is_not_an_echo() -> None:
    assert degenerate("What is 6 * 7? 42", PROMPT_TEXT) is None
    assert degenerate("Question: What is 6 * 7? It is 42", PROMPT_TEXT) is None
    assert degenerate("What is 6 * 70?", PROMPT_TEXT) is None
    # a word that is not an echo label before the prompt
    assert degenerate("Hello what is 6 * 7", PROMPT_TEXT) is None


def test_a_prompt_that_starts_with_a_label_word_is_echoed_whole() -> None:
    # "question ..." is the prompt itself, not a label before it.
    prompt = "Question 3: name the capital of France."
    assert found("question 3 name the capital of france", prompt).kind == "prompt_echo"
    assert found("Question: Question 3: name the capital of France", prompt).kind == "prompt_echo"
    assert degenerate("Question 3: name the capital of France. Paris", prompt) is None


def test_a_one_word_reply_equal_to_an_echo_label_is_an_echo_of_that_prompt_only() -> None:
    # "task" with no space after it is no label: the reply is compared whole.
    assert found("Task", "task").kind == "prompt_echo"
    assert degenerate("Task", "Do the task") is None


def test_a_prompt_without_letters_or_digits_is_never_echoed() -> None:
    assert degenerate("Paris", "???") is None
    assert degenerate("Question Paris", "...") is None


def test_a_reply_equal_to_the_reference_or_its_final_answer_is_never_degenerate() -> None:
    assert degenerate("Solution", "Translate 'solución'.", "Solution") is None
    assert degenerate("Solution.", "Translate 'solución'.", "Answer: solution") is None
    assert degenerate("What is 6 * 7?", PROMPT_TEXT, "what is 6*7") is None
    assert degenerate("Solution", "Translate 'solución'.", "Merci") is not None
    assert degenerate("Solution", "Translate 'solución'.") is not None


def test_an_empty_or_blank_reference_exempts_nothing() -> None:
    # a blank reference normalises to "", which a reply without letters also is
    assert found(":", reference="   ") == Degenerate("no_content", "no letter or digit: ':'")
    assert found(":", reference="") == Degenerate("no_content", "no letter or digit: ':'")
    assert found("Solution", reference="").kind == "opener"


def test_the_learned_rules_see_the_normalised_reply_and_prompt() -> None:
    seen: list[tuple[str, str]] = []
    caught = Degenerate("learned", "rule 3")

    def learned(norm: str, prompt: str) -> Degenerate | None:
        seen.append((norm, prompt))
        return caught if norm == "youre right" else None

    assert degenerate("You're RIGHT!", "Is it 42?", learned=learned) is caught
    assert degenerate("It is 42.", "Is it 42?", learned=learned) is None
    assert seen == [("youre right", "is it 42"), ("it is 42", "is it 42")]
    # the earlier kinds win; the rules are not asked
    assert degenerate("Solution", "Is it 42?", learned=learned) == found("Solution", "Is it 42?")
    assert len(seen) == 2
    assert degenerate("You're right", "Is it 42?") is None  # no rules, nothing learned


def test_normalise_folds_case_width_and_punctuation() -> None:
    assert normalise("**Let\u2019s  Solve:** this!") == "lets solve this"
    assert normalise("解答\uff1a") == "解答"
    assert normalise("Stra\u00dfe \ufb01ne") == "strasse fine"  # casefold, NFKC
    assert normalise("  ") == ""


def test_a_degenerate_reason_is_frozen() -> None:
    reason = Degenerate("opener", "x")
    with pytest.raises(AttributeError):
        reason.kind = "empty"  # type: ignore[misc]
