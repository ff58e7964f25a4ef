"""Character classes of Python's ``re`` spelled for RE2, and translation maps built lazily.

RE2's ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII-only; Python's (on ``str``) are Unicode.
The patterns of :mod:`amaris.text` use the spellings below where the difference matters (a
digit or a letter outside ASCII), so that they read text as Python's ``re`` does.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterator
from typing import Protocol, cast

import re2

WORD = r"\pL\pN_"
"""Inside a class: Python's ``\\w`` (letters, numbers, the underscore)."""
DIGIT = r"\p{Nd}"
"""Python's ``\\d``: any decimal digit."""
SPACE_CHARS = r"\t-\r\x{1c}-\x{1f} \x{85}\pZ"
"""Inside a class: Python's ``\\s``, every character ``str.isspace`` accepts."""
SPACE = f"[{SPACE_CHARS}]"
"""Python's ``\\s``."""

_MAX_CACHED = 65_536
"""Distinct characters a :class:`CharMap` remembers (beyond it, it starts afresh)."""


class CharMap(dict[int, int | None]):
    """A ``str.translate`` table computed per character on first sight, then looked up in C.

    ``rule`` maps one character to its replacement (``""``: dropped). A policy's reply uses
    a few hundred distinct characters, so after the first ones ``text.translate(table)``
    runs at C speed over 100 KB (a Python loop per character would be slow).
    """

    def __init__(self, rule: Callable[[str], str]) -> None:
        super().__init__()
        self._rule = rule

    def __missing__(self, code: int) -> int | None:
        if len(self) >= _MAX_CACHED:
            self.clear()
        out = self._rule(chr(code))
        value = None if out == "" else ord(out)
        self[code] = value
        return value


def _word_or_space(char: str) -> str:
    return char if char.isalnum() or char == "_" or char.isspace() else " "


def _alnum_or_mark(char: str) -> str:
    if char in "'\u2019\u2018`":
        return ""
    keep = char.isalnum() or unicodedata.category(char)[0] == "M"
    return char if keep else " "


PUNCTUATION_TO_SPACE = CharMap(_word_or_space)
"""Every character but Python's ``\\w`` and ``\\s`` made a space (``[^\\w\\s]`` -> ``" "``)."""
WORDS_ONLY = CharMap(_alnum_or_mark)
"""Apostrophes dropped; every character but letters, numbers and marks made a space."""

_UTF8 = ("utf-8", "surrogatepass")
"""How :func:`spaced_words` encodes text (a lone surrogate, which JSON can carry, too)."""
_ASCII_BYTES = bytes(range(128))
_ASCII_DROPPED = bytes(b for b in range(128) if not _alnum_or_mark(chr(b)))
_ASCII_WORDS = bytes(ord(_alnum_or_mark(chr(b)) or " ") if b < 128 else b for b in range(256))
""":data:`WORDS_ONLY` on the bytes of UTF-8 text: ASCII as the map has it (the dropped
characters are deleted by :data:`_ASCII_DROPPED` first), the other bytes unchanged."""
_ASCII_FOLDED_WORDS = _ASCII_WORDS.lower()
""":data:`_ASCII_WORDS` with the letters case folded (ASCII's case folding is ``lower``)."""
MAX_REPLACED = 16
"""Distinct non-ASCII characters :func:`spaced_words` replaces one by one; past it, one
``str.translate`` of the whole text (slower, as linear)."""


def _words_of(char: str, fold: bool) -> str:
    """What :func:`spaced_words` makes of one character (case folded first if ``fold``)."""
    return (char.casefold() if fold else char).translate(WORDS_ONLY)


def spaced_words(text: str, fold: bool = False) -> str:
    """``" ".join(text.translate(WORDS_ONLY).split())``: the letters, numbers and marks of
    ``text``, every other run of characters one space, apostrophes dropped, ends stripped;
    with ``fold``, of ``text.casefold()`` (the same, in the same pass).

    ``str.translate`` looks every character up in the map once the text holds a non-ASCII
    one, and ``casefold`` copies the text once more.
    Instead: one ``bytes.translate`` of the UTF-8 text maps (and folds) the ASCII
    characters, and one ``bytes.replace`` each distinct non-ASCII character that the map
    (or folding) changes (a UTF-8 character's bytes never occur inside another's), up to
    :data:`MAX_REPLACED` of them (cheaper than a ``casefold`` of the whole text first).
    ``str.casefold`` maps each character on its own (no context), so
    folding character by character folds the text.
    """
    if text.isascii():  # str.translate's own fast path (ASCII's case folding is lower)
        return " ".join((text.lower() if fold else text).translate(WORDS_ONLY).split())
    data = text.encode(*_UTF8)
    others = data.translate(None, _ASCII_BYTES).decode(*_UTF8)
    replaced = {char: _words_of(char, fold) for char in set(others)}
    changed = {char: out for char, out in replaced.items() if out != char}
    made = "".join(changed.values())
    if len(changed) > MAX_REPLACED or any(char in changed for char in made):
        # Many distinct ones; or a replacement holds a character replaced too (folding
        # is idempotent, so it should not happen): the whole text through str methods.
        whole = text.casefold() if fold else text
        return " ".join(whole.translate(WORDS_ONLY).split())
    for char, out in changed.items():
        data = data.replace(char.encode(*_UTF8), out.encode(*_UTF8))
    data = data.translate(_ASCII_FOLDED_WORDS if fold else _ASCII_WORDS, _ASCII_DROPPED)
    return b" ".join(data.split()).decode(*_UTF8)


class Match(Protocol):
    """What amaris reads of an RE2 match (the ``re.Match`` API)."""

    def group(self, group: int | str = 0, /) -> str | None: ...

    def start(self, group: int = 0, /) -> int: ...

    def end(self, group: int = 0, /) -> int: ...

    def span(self, group: int = 0, /) -> tuple[int, int]: ...


class Pattern(Protocol):
    """What amaris uses of an RE2 pattern (the ``re.Pattern`` API, ``pos`` included)."""

    def search(self, text: str, pos: int | None = None) -> Match | None: ...

    def match(self, text: str, pos: int | None = None) -> Match | None: ...

    def fullmatch(self, text: str) -> Match | None: ...

    def finditer(self, text: str, pos: int | None = None) -> Iterator[Match]: ...

    def sub(self, repl: str | Callable[[Match], str], text: str, count: int = 0) -> str: ...


def compile_pattern(pattern: str, ignore_case: bool = False) -> Pattern:
    """``pattern`` compiled by RE2 (kept in the module's cache), case-insensitive if asked.

    Raises:
        re2.error: RE2 cannot compile it (backreferences and lookarounds are not RE2).
    """
    options = re2.Options()
    options.case_sensitive = not ignore_case
    return cast(Pattern, re2.compile(pattern, options))
