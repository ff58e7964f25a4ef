"""Judge canary probes mined from the policy's own replies: parts of a reply that hold no
right answer, and the reply with its answer swapped for a wrong one.

From a reply and its final answer (the reference's when the rollout has one, else the
reply's own, :func:`~amaris.text.answers.extract_final_answer`):

* ``opener``: its opening sentence alone;
* ``no_answer``: the reply cut before the sentence that states its final answer;
* ``half``: the reply cut at half its length (at a space);
* ``swapped``: the reply with its final answer (a number) replaced by another number.

The first three are probes only when the text left holds neither answer (not the reply's,
not the reference's): their right reward is then the floor. A swapped reply is a probe only
when amaris reads the new number as its final answer. Each function returns None when the
reply gives no such probe. Linear in the reply: one pass, RE2 or ``str`` methods; callers
skip replies over :data:`MAX_SOURCE_CHARS`.
"""

from __future__ import annotations

from fractions import Fraction

from amaris.text.answers import (
    ANSWER_WINDOW,
    answers_match,
    canonical_number,
    extract_final_answer,
    is_numeric,
    normalise_text,
)
from amaris.text.chars import DIGIT, compile_pattern

MAX_SOURCE_CHARS = 20_000
"""Longest reply probes are mined from (longer ones are skipped: bounded work per step)."""
MAX_OPENER_CHARS = 400
"""Longest opening sentence taken as a probe."""

_NUMBER = compile_pattern(rf"-?{DIGIT}(?:{DIGIT}|,{DIGIT}{{3}})*(?:\.{DIGIT}+)?(?:/{DIGIT}+)?")
"""A number token (its canonical value: :func:`canonical_number`)."""
_SENTENCE_ENDS = ".!?"


def opening_sentence(text: str) -> str | None:
    """The first sentence (up to ``.``, ``!`` or ``?`` followed by a space, or a line end),
    when something follows it and it is at most :data:`MAX_OPENER_CHARS` long."""
    stripped = text.strip()
    limit = min(len(stripped), MAX_OPENER_CHARS + 1)
    for index in range(limit):
        char = stripped[index]
        end = None
        if char == "\n":
            end = index
        elif char in _SENTENCE_ENDS and (
            index + 1 == len(stripped) or stripped[index + 1].isspace()
        ):
            end = index + 1
        if end is not None:
            opener = stripped[:end].strip()
            rest = stripped[end:].strip()
            return opener if opener and rest else None
    return None


def half_cut(text: str) -> str | None:
    """The reply's first half, cut back to the last space in it (when there is one in its
    second quarter)."""
    stripped = text.strip()
    half = stripped[: len(stripped) // 2]
    space = half.rfind(" ")
    if space >= len(stripped) // 4:
        half = half[:space]
    half = half.rstrip()
    return half or None


def number_spans(text: str, answer: str) -> list[tuple[int, int]]:
    """Where ``text``'s last :data:`ANSWER_WINDOW` characters write the number ``answer``
    (canonical), as (start, end) offsets in ``text``."""
    base = max(0, len(text) - ANSWER_WINDOW)
    return [
        (base + match.start(), base + match.end())
        for match in _NUMBER.finditer(text[base:])
        if canonical_number(match.group() or "") == answer
    ]


def holds(text: str, answer: str) -> bool:
    """Whether ``text`` states the canonical ``answer`` anywhere (a number written in any
    form, or the answer's words whole)."""
    if is_numeric(answer):
        return any(canonical_number(m.group() or "") == answer for m in _NUMBER.finditer(text))
    return answers_match(normalise_text(text), answer)


def free_of(text: str, answers: list[str]) -> bool:
    """Whether ``text`` is non-empty and states none of ``answers``."""
    return bool(text.strip()) and not any(holds(text, a) for a in answers)


def without_final_answer(text: str, answer: str) -> str | None:
    """The reply cut before the sentence that holds the last statement of its final
    ``answer`` (canonical; a number or words)."""
    if is_numeric(answer):
        spans = number_spans(text, answer)
        at = spans[-1][0] if spans else -1
    else:
        at = text.lower().rfind(answer)
    if at <= 0:
        return None
    start = at
    while start > 0 and not (
        text[start - 1] == "\n"
        or (start >= 2 and text[start - 1].isspace() and text[start - 2] in _SENTENCE_ENDS)
    ):
        start -= 1
    cut = text[:start].rstrip()
    return cut or None


def swapped(text: str, answer: str) -> str | None:
    """The reply with the last statement of its final ``answer`` (a number) replaced by the
    number one greater, when amaris then reads that number as its final answer."""
    if not is_numeric(answer):
        return None
    spans = number_spans(text, answer)
    if not spans:
        return None
    value = Fraction(answer) + 1
    wrong = canonical_number(f"{value.numerator}/{value.denominator}")
    if wrong is None:
        return None
    start, end = spans[-1]
    changed = text[:start] + wrong + text[end:]
    return changed if extract_final_answer(changed) == wrong else None
