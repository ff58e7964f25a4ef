"""Untrusted text placed in Markdown that renders as that text: no link, image or HTML.

Prefect's UI renders markdown artifacts as GitHub-flavoured Markdown, and so does its V1 UI
with the string cells of table artifacts (the V2 UI shows those as plain text, escapes and
all: hence no more escapes than inertness needs). The V2 UI (react-markdown with remark-gfm,
rehype-raw and rehype-sanitize's default schema) keeps ``<img src>`` and ``<a href>`` with
http(s) URLs, and links bare URLs, ``www.`` names and e-mail addresses found in the text
once its escapes are resolved; the V1 UI (marked, DOMPurify) keeps any image and any link,
``javascript:`` included. So :func:`inert`:

* backslash-escapes every character that opens an inline construct or a table cell
  (``\\ ` * ~ [ ] < > & |``, and ``_`` but between two letters or digits, where it
  never emphasises, so a snake_case tag reads as is in a plain-text cell): no link,
  image, autolink, raw HTML, entity, code span, emphasis or cell can start from the text,
  and the escapes render as the characters;
* escapes a block marker at the start (``#``, ``-``, ``+``, ``1.``, ``1)``): the text is
  a paragraph, a list item or a cell, never a heading, a rule or a nested list;
* defangs what GFM links without markup: ``://`` becomes ``[:]//``, ``@`` ``[@]`` and
  ``www.`` ``www[.]`` (the brackets escaped, so they show);
* folds every run of whitespace, newlines included, into one space: one line, so a table
  row stays one row and the start is the only line start;
* reads the first ``limit`` characters only (``…`` marks the cut), in a few passes of
  ``str`` methods and one RE2 substitution: linear, whatever the text repeats.
"""

from __future__ import annotations

from itertools import pairwise

from amaris.text.chars import compile_pattern

MAX_CHARS = 1_000
"""Characters of an untrusted string an artifact shows by default (a summary paragraph)."""

_ESCAPED = "\\`*~[]<>&|"
"""Characters escaped wherever they are: each opens an inline construct or a table cell."""
_ESCAPES = {ord(char): "\\" + char for char in _ESCAPED}
_BLOCK_MARKERS = "#-+"
"""Characters that open a block (heading, list, rule) at the start of a line only."""
_WWW = compile_pattern(r"(www)\.", ignore_case=True)


def inert(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` as Markdown that renders as ``text`` on one line, with ``://``, ``@`` and
    ``www.`` defanged, cut to its first ``limit`` characters (see the module)."""
    cut = text[:limit] + ("…" if len(text) > limit else "")
    flat = " ".join(cut.split())
    defanged = _WWW.sub(r"\1[.]", flat.replace("://", "[:]//").replace("@", "[@]"))
    escaped = _underscores(defanged.translate(_ESCAPES))
    if escaped and escaped[0] in _BLOCK_MARKERS:
        return "\\" + escaped
    digits = len(escaped) - len(escaped.lstrip("0123456789"))
    if digits and escaped[digits : digits + 1] in (".", ")"):  # an ordered list's "1." / "1)"
        return escaped[:digits] + "\\" + escaped[digits:]
    return escaped


def _underscores(text: str) -> str:
    """``text`` with each ``_`` escaped unless a letter or digit is on both sides."""
    if "_" not in text:
        return text
    parts = text.split("_")
    out = [parts[0]]
    for before, after in pairwise(parts):
        out.append("_" if before[-1:].isalnum() and after[:1].isalnum() else "\\_")
        out.append(after)
    return "".join(out)
