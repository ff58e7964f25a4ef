"""The response in an OpenRLHF query: what follows its prompt (``POST /get_reward``).

OpenRLHF sends ``query[i]`` = its tokenizer's decode of prompt tokens + response tokens, and
``prompts[i]`` = the dataset's prompt. A query is normally the prompt followed by the
response, maybe after a BOS token the decode added. OpenRLHF cuts a prompt longer than its
budget to its last tokens: the query then starts with a tail of the prompt (of at least
:data:`MIN_PROMPT_TAIL` characters; a character split by the cut decodes as U+FFFD and is
skipped) and the response is what follows it.

A tokenizer's decode need not give the text back: a WordPiece tokenizer lower-cases, strips
accents and spaces punctuation out (``"Don't"`` -> ``"don ' t"``), a clean-up joins
``" ?"`` to ``"?"``, SentencePiece adds or drops a leading space. When the query does not
hold the prompt as it is, both are compared :func:`folded` (case, accents, compatibility
forms, spaces and control characters set aside) and the response is the query's text after
the prompt's last folded character, from its next folded one. A character the tokenizer does
not know (decoded as its unknown token, e.g. ``[UNK]``) is not recovered: such a query stays
unmatched.

Linear in the lengths: one pass to fold, ``str.find`` (linear in the worst case, CPython's
two-way search) and :func:`_longest_tail`.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

MIN_PROMPT_TAIL = 16
"""The shortest tail of a prompt taken as the start of a truncated one: shorter overlaps
could be chance (a query that does not hold its prompt at all stays unmatched)."""

_DROPPED = frozenset({"Mn", "Cc", "Cf"})
"""Unicode categories folded away: combining marks (accents), control and format characters
(a BERT normalizer removes them)."""


def response_of(query: str, prompt: str) -> str | None:
    """The response in ``query``, or None when the query does not hold its prompt (see the
    module docstring)."""
    skipped = len(query) - len(query.lstrip("\ufffd"))
    end = _prompt_end(query, prompt, skipped)
    if end is not None:
        return query[end:]
    folded_query, starts = folded(query)
    folded_prompt, _ = folded(prompt)
    skipped = len(folded_query) - len(_lstrip_punctuation(folded_query))
    end = _prompt_end(folded_query, folded_prompt, skipped)
    if end is None:
        return None
    return query[starts[end] :] if end < len(starts) else ""


def _lstrip_punctuation(text: str) -> str:
    """``text`` from its first letter or digit: a cut prompt's first token may be a word's
    continuation (WordPiece's ``##``), the cut character's U+FFFD, or punctuation the
    prompt's tail also holds."""
    for at, char in enumerate(text):
        if char.isalnum():
            return text[at:]
    return ""


def _prompt_end(query: str, prompt: str, skipped: int) -> int | None:
    """Where in ``query`` its prompt ends: after the whole prompt, else after the longest
    tail of it the query continues with from ``skipped``; None without one."""
    if query.startswith(prompt):
        return len(prompt)
    at = query.find(prompt) if prompt else -1
    if at >= 0:
        return at + len(prompt)
    tail = _longest_tail(prompt, query, skipped)
    return None if tail is None else skipped + tail


def folded(text: str) -> tuple[str, list[int]]:
    """``text`` case-folded, in compatibility decomposition (NFKD), without combining marks,
    spaces, control and format characters; with, per folded character, the index in
    ``text`` of the character it came from."""
    parts: list[str] = []
    starts: list[int] = []
    for at, char in enumerate(text):
        part = _fold(char)
        if part:
            parts.append(part)
            starts.extend([at] * len(part))
    return "".join(parts), starts


@lru_cache(maxsize=65_536)
def _fold(char: str) -> str:
    decomposed = unicodedata.normalize("NFKD", char.casefold())
    return "".join(
        c
        for c in decomposed
        if not c.isspace() and c != "\ufffd" and unicodedata.category(c) not in _DROPPED
    )


def _longest_tail(prompt: str, query: str, start: int) -> int | None:
    """The length of the longest tail of ``prompt`` (at least ``MIN_PROMPT_TAIL``) that
    ``query`` continues with from ``start``; None without one.

    The places the prompt's tail can start are where the query's first characters occur
    in it, each checked by one comparison in C; when they would cost more than a few
    passes over the texts (a repetitive prompt holds them everywhere), the overlap is
    computed by Knuth-Morris-Pratt instead: linear either way.
    """
    head = query[start : start + MIN_PROMPT_TAIL]
    if len(head) < MIN_PROMPT_TAIL:
        return None
    budget = 4 * (len(prompt) + len(query))
    at = prompt.find(head)
    while at >= 0:
        tail = len(prompt) - at
        budget -= tail + MIN_PROMPT_TAIL
        if budget < 0:
            return _overlap(prompt, query[start : start + len(prompt)])
        if query.startswith(prompt[at:], start):
            return tail
        at = prompt.find(head, at + 1)
    return None


def _overlap(text: str, pattern: str) -> int | None:
    """The length of the longest prefix of ``pattern`` that ``text`` ends with (at least
    ``MIN_PROMPT_TAIL``), by Knuth-Morris-Pratt: O(len(text) + len(pattern))."""
    failure = [0] * len(pattern)
    k = 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = failure[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        failure[i] = k
    k = 0
    for char in text[len(text) - len(pattern) :] if len(pattern) < len(text) else text:
        while k and (k == len(pattern) or char != pattern[k]):
            k = failure[k - 1]
        if k < len(pattern) and char == pattern[k]:
            k += 1
    return k if k >= MIN_PROMPT_TAIL else None
