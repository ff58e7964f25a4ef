"""Degenerate replies: the shapes a policy's repetition loops take, for the tests and
``bench/probes/degenerate_replies.py``.

Each family builds a text of exactly ``size`` characters. Python's backtracking ``re``
stalls on the first three (the pre-check's opener sequence, the trailing "= X" of answer
extraction, the lists of alternatives).
"""

from __future__ import annotations

from collections.abc import Callable

QUESTION = "What is 6 * 7?"
REFERENCE = "Answer: 42"
ANSWER = "The answer is 42."
SIZES = (1_000, 10_000, 100_000)
FIELDS = ("output", "input", "supplemental_context")


def _repeat(piece: str, size: int) -> str:
    return (piece * (size // len(piece) + 1))[:size]


def opener(size: int) -> str:
    """A reasoning opener repeated, then the answer."""
    return _repeat("Let's think step by step. ", size - len(ANSWER)) + ANSWER


def equation(size: int) -> str:
    """``= a``, spaces, ``b``: the trailing-equation pattern's worst case."""
    return "= a" + " " * (size - 4) + "b"


def number_list(size: int) -> str:
    """``1, `` repeated: the lists of alternatives."""
    return _repeat("1, ", size)


def nested_boxed(size: int) -> str:
    """``\\boxed{`` nested, never closed."""
    return _repeat("\\boxed{", size)


def digits(size: int) -> str:
    """One run of digits."""
    return "7" * size


def mixed(size: int) -> str:
    """All of the above and more (hedges, steps, non-ASCII letters), interleaved."""
    return _repeat(
        "Let's think step by step. = a     b 1, 2, 3, or 4, \\boxed{\\boxed{4}} "
        "98765432109876543210 The answer is 42. Maybe I think so. Step 1: then = x. "
        "é漢字 ",
        size,
    )


FAMILIES: dict[str, Callable[[int], str]] = {
    "opener": opener,
    "equation": equation,
    "list": number_list,
    "nested_boxed": nested_boxed,
    "digits": digits,
    "mixed": mixed,
}


def rollout(rid: str, field: str, text: str) -> dict[str, str]:
    """A rollout whose ``field`` holds ``text`` (the others: the question, its answer, its
    reference)."""
    fields = {"id": rid, "input": QUESTION, "output": ANSWER, "supplemental_context": REFERENCE}
    return {**fields, field: text}
