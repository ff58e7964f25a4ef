"""The master-key pre-check: degenerate replies get the floor reward without a judge call.

LLM judges are fooled by "master keys": replies with no answer in them that many judges
reward anyway (Zhao et al. 2025, "One Token to Fool LLM-as-a-Judge", report false-positive
rates up to 80-90% for ``:``, ``Solution``, ``Thought process:``, ``Let's solve this
problem step by step.``, ``解``, ``Respuesta``...). A policy trained against such a judge
learns to answer with them. :func:`degenerate` catches them before the judge
(``scoring.precheck``); the reward is then ``scoring.precheck.floor`` with the reason.

A reply is degenerate when, with its ends' whitespace stripped, it is

* ``empty``: nothing at all;
* ``no_content``: no letter and no digit (punctuation, symbols, whitespace: ``:``, ``...``);
* ``opener``: only reasoning openers and answer labels, in any order and number
  (``Solution``, ``Answer:``, ``Thought process:``, ``Let's solve this step by step.``,
  ``Step 1:``, ``解``, ``かいせつ``, ``Respuesta``, ``Lösung``...), case, punctuation and
  markup aside;
* ``prompt_echo``: the prompt repeated (optionally labelled ``Question:`` and followed by
  openers), case, punctuation and whitespace aside.
* ``learned``: equal (normalised) to a reply a judge canary caught the training judge
  paying for (:mod:`amaris.trust.learned_rules`; docs/judge-canaries.md).

Short answers are not degenerate: ``42``, ``Paris``, ``Yes``, ``B``, ``x = 3`` all have
content. A reply equal to the reference answer (``rollout.supplemental_context``, or the
final answer found in it) is never degenerate, whatever it reads ("Solution" may be the
right translation of "solución"). Pure and deterministic.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import re2

from amaris.text.answers import extract_final_answer
from amaris.text.chars import compile_pattern, spaced_words

Kind = Literal["empty", "no_content", "opener", "prompt_echo", "learned"]

_LABELS = (
    # English answer labels and reasoning openers, as normalised (lowercase, no apostrophe,
    # other punctuation as spaces).
    "answer",
    "answers",
    "the answer",
    "my answer",
    "final answer",
    "the final answer",
    "the answer is",
    "the final answer is",
    "answer is",
    "solution",
    "solutions",
    "the solution",
    "my solution",
    "solution is",
    "the solution is",
    "step by step solution",
    "solution step by step",
    "full solution",
    "detailed solution",
    "here is the solution",
    "heres the solution",
    "here is my solution",
    "here is the answer",
    "heres the answer",
    "here is my answer",
    "as follows",
    "response",
    "explanation",
    "reasoning",
    "analysis",
    "thought",
    "thoughts",
    "thought process",
    "thinking",
    "thinking process",
    "reasoning process",
    "my thought process",
    "chain of thought",
    "think",
    "let me think",
    "let me see",
    "let me think step by step",
    "let me solve this",
    "let me solve this step by step",
    "let me work through this",
    "step by step",
    "step 1",
    "first",
    "firstly",
    "to solve this",
    "to solve this problem",
    "we need to",
    "hmm",
    "boxed",
    # Other languages (Zhao et al. list Chinese, Japanese and Spanish ones).
    "解",
    "解答",
    "解析",
    "答",
    "答案",
    "回答",
    "思考过程",
    "解题过程",
    "解説",
    "かいせつ",
    "答え",
    "こたえ",
    "解き方",
    "respuesta",
    "la respuesta",
    "solución",
    "solucion",
    "la solución",
    "réponse",
    "reponse",
    "la réponse",
    "lösung",
    "losung",
    "antwort",
    "risposta",
    "soluzione",
    "resposta",
    "solução",
    "ответ",
    "решение",
    "정답",
    "풀이",
    "해설",
    "الحل",
    "الجواب",
)
_OPENER_SLOTS: tuple[tuple[bool, tuple[str, ...]], ...] = (
    # (optional, alternatives): one alternative of each slot in turn, single spaces between.
    (True, ("ok", "okay", "sure", "alright", "well", "so", "now")),
    (
        False,
        (
            "lets", "let us", "i will", "ill", "we will", "well", "i shall", "we shall",
            "i am going to", "im going to", "we are going to", "were going to", "i need to",
            "we need to", "first",
        ),
    ),
    (
        False,
        (
            "solve", "think", "work", "go", "break", "tackle", "approach", "figure", "reason",
            "analyse", "analyze", "look", "start", "begin", "compute", "calculate", "find",
            "answer", "do", "carefully solve", "carefully think",
        ),
    ),
    (True, ("about", "through", "out", "down", "at", "on", "with", "into", "over", "it out")),
    (True, ("this", "it", "that", "the", "a", "our", "each")),
    (
        True,
        (
            "problem", "question", "task", "one", "math problem", "equation", "exercise",
            "step", "steps",
        ),
    ),
    (
        True,
        ("carefully", "step by step", "systematically", "together", "first", "now",
         "one step at a time"),
    ),
)  # fmt: skip
"""The reasoning openers ("lets solve this problem step by step"), slot by slot."""


def _alternatives(words: tuple[str, ...]) -> str:
    return f"(?:{'|'.join(re2.escape(w) for w in words)})"


def _opener() -> str:
    (first_optional, first), *rest = _OPENER_SLOTS
    assert first_optional  # the pattern below: "ok " before the subject
    pattern = f"(?:{_alternatives(first)} )?"
    for index, (optional, words) in enumerate(rest):
        part = f"{' ' if index else ''}{_alternatives(words)}"
        pattern += f"(?:{part})?" if optional else part
    return pattern


_OPENER = _opener()
_ITEM = rf"(?:{_OPENER}|{'|'.join(re2.escape(label) for label in _LABELS)})"
_SEQUENCE = compile_pattern(rf"{_ITEM}(?: {_ITEM})*")
"""One or more openers or labels, separated by single spaces (the normalised form). RE2: a
backtracking engine is catastrophically slow on "Let's think step by step. " x 26 + "The
answer is 42."."""
_ITEM_WORDS = frozenset(
    word
    for phrase in (*_LABELS, *(w for _, words in _OPENER_SLOTS for w in words))
    for word in phrase.split()
)
"""Every word an opener or label holds: a normalised reply with another word is no
``opener``."""
_ECHO_LABELS = frozenset({"question", "problem", "prompt", "task", "q", "input"})


@dataclass(frozen=True)
class Degenerate:
    """Why a reply is degenerate."""

    kind: Kind
    detail: str

    def reason(self) -> str:
        """The response's ``reason``: ``degenerate_reply: <kind> (<detail>)``."""
        return f"degenerate_reply: {self.kind} ({self.detail})"


def normalise(text: str) -> str:
    """``text`` compared as words: NFKC, case folded, apostrophes dropped, every run of
    characters other than letters, digits and marks made one space, ends stripped.

    Linear, at C speed: ``str`` and ``bytes`` methods (:func:`spaced_words`, which folds
    the case in the same pass)."""
    return spaced_words(unicodedata.normalize("NFKC", text), fold=True)


def _is_reference(norm: str, reference: str | None) -> bool:
    if not reference or not reference.strip():
        return False
    answer = extract_final_answer(reference)
    return norm in {normalise(reference), normalise(answer or "")}


HEAD_CHARS = 1_024
"""Characters of a reply (and of its prompt) normalised first: a reply that is neither an
opener nor the prompt's echo usually shows it within them, and is not normalised whole."""


def degenerate(
    output: str,
    prompt: str,
    reference: str | None = None,
    learned: Callable[[str, str], Degenerate | None] | None = None,
) -> Degenerate | None:
    """Why the reply ``output`` to ``prompt`` is degenerate, or None when it is not.

    ``reference`` is the rollout's ``supplemental_context``: a reply equal to it (or to
    the final answer found in it) is never degenerate. ``learned`` matches the normalised
    reply and prompt against the rules judge canaries taught
    (:meth:`amaris.trust.learned_rules.LearnedRules.match`).

    Without ``learned``, a long reply is normalised whole only when its first
    :data:`HEAD_CHARS` characters or so do not settle it (:func:`_settled_by_head`), and a
    long prompt only as far as the comparison with the reply reads it: the same answer,
    without normalising a long reply twice for a reply that says something.
    """
    shown = output.strip()
    if not shown:
        return Degenerate("empty", f"{len(output)} whitespace characters" if output else "empty")
    if learned is None:
        head, whole = _normalised_head(shown, HEAD_CHARS)
        if not whole and _settled_by_head(head, prompt):
            return None
        norm = head if whole else normalise(shown)
    else:
        norm = normalise(shown)
    found = _finding(shown, norm, prompt, learned)
    # The exemption is read only for a reply found degenerate: most replies are not, and
    # the reference's answer extraction would cost each of them a large share of /score's CPU.
    if found is not None and _is_reference(norm, reference):
        return None
    return found


def _normalised_head(text: str, chars: int) -> tuple[str, bool]:
    """``(normalise(text[:cut]), cut == len(text))``, ``cut`` the first space or line feed
    of ``text`` at or after ``chars`` (the end if none).

    ``normalise(text)`` starts with it, whole words (then a space if more follows): no
    character composes with a space or line feed under NFKC, case folding and the word map
    read one character at a time, and the space ends a word.
    """
    cut = len(text)
    if cut > chars:
        for mark in (" ", "\n"):
            found = text.find(mark, chars, cut)
            if found >= 0:
                cut = found
    return normalise(text[:cut]), cut == len(text)


def _settled_by_head(head: str, prompt: str) -> bool:
    """Whether a reply whose normalised text starts with ``head`` (whole words, and more
    after them) is neither ``opener`` nor ``prompt_echo``, whatever follows: ``head`` has a
    word no opener or label holds, and it differs from the prompt's normalised text before
    either ends (also after an echo label)."""
    if all(word in _ITEM_WORDS for word in head.split()):
        return False
    echoed, whole = _normalised_head(prompt, HEAD_CHARS)
    if whole and not echoed:
        return True  # nothing to echo
    label, _, after = head.partition(" ")
    starts = (head, after) if label in _ECHO_LABELS else (head,)
    return all(_apart(start, echoed) for start in starts)


def _apart(text: str, other: str) -> bool:
    """Whether ``text`` and ``other`` differ before the shorter one ends (so no text that
    starts with the one starts with the whole of a text that starts with the other)."""
    shared = min(len(text), len(other))
    return text[:shared] != other[:shared]


def _finding(
    shown: str,
    norm: str,
    prompt: str,
    learned: Callable[[str, str], Degenerate | None] | None,
) -> Degenerate | None:
    """What makes the stripped reply ``shown`` (normalised: ``norm``) degenerate, before
    the reference exemption."""
    quoted = repr(shown[:40] + ("..." if len(shown) > 40 else ""))
    if not norm:
        return Degenerate("no_content", f"no letter or digit: {quoted}")
    if _SEQUENCE.fullmatch(norm):
        return Degenerate("opener", f"only a reasoning opener or answer label: {quoted}")
    echoed = normalise(prompt) if learned is not None else _echo_head(prompt, len(norm))
    if echoed:
        label, space, after = norm.partition(" ")
        labelled = bool(space) and label in _ECHO_LABELS and not norm.startswith(echoed)
        rest = after if labelled else norm
        if rest.startswith(echoed):
            tail = rest[len(echoed) :].strip()
            if not tail or _SEQUENCE.fullmatch(tail):
                return Degenerate("prompt_echo", "the prompt repeated, nothing else")
    return learned(norm, echoed) if learned is not None else None


def _echo_head(prompt: str, chars: int) -> str:
    """``normalise(prompt)``, or a start of it longer than ``chars`` (the normalised reply's
    length): no reply starts with either then, so the echo check reads the same."""
    head, whole = _normalised_head(prompt, 2 * chars + HEAD_CHARS)
    return head if whole or len(head) > chars else normalise(prompt)
