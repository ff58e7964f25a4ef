r"""The final answer of a reply or a reference, canonical, found in linear time.

Answers are reduced to a *canonical* string so they can be compared with ``==``:

* a number becomes its exact value written plainly: ``"4.0"``, ``"4"`` and ``"8/2"`` all give
  ``"4"``; ``"1,000"`` gives ``"1000"``; ``"12.50"`` gives ``"12.5"``; ``"1/3"`` stays ``"1/3"``;
* any other answer becomes lowercase words without punctuation: ``"Paris."`` gives ``"paris"``.

Bounds: :func:`extract_final_answer`, :func:`find_candidate_answers`, :func:`boxed_contents`
and :func:`answer_segments` read only the last :data:`ANSWER_WINDOW` characters of the text
(a reply ends with its answer; a ``\boxed{`` opened before the window is not seen), and the
last-number fallback only the last :data:`NUMBER_WINDOW`. The patterns run on RE2 (linear in
the text) and the brace matching is one pass. Each RE2 match costs Python time in the
binding, so nothing iterates over an unbounded number of them: candidate answers read
at most :data:`MAX_LISTS` boxes, answer segments and lists of alternatives, and a list at
most :data:`MAX_LISTED` numbers; a box, segment or list that repeats one already read is not
read again (a repetition loop offers the same one many times). Integers are made canonical
without :class:`~fractions.Fraction`, and brace matching visits the braces only. A call's
cost stays bounded, whatever the reply repeats.

Known limits: a list of alternatives written right after another
one's closing punctuation with no space (``"3 or 4,5 or 6."``) yields the first only, and
the caps above.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from decimal import Decimal
from fractions import Fraction
from itertools import islice

from amaris.text.chars import (
    DIGIT,
    PUNCTUATION_TO_SPACE,
    SPACE,
    WORD,
    Match,
    Pattern,
    compile_pattern,
)

ANSWER_WINDOW = 4_000
"""Characters at the end of a text that answer extraction reads (about 1,000 tokens)."""

_D = DIGIT
_S = SPACE
_NUM = rf"-?(?:{_D}{{1,3}}(?:,{_D}{{3}})+|{_D}+)(?:\.{_D}+)?(?:/{_D}+(?:\.{_D}+)?)?"
"""A number: optional minus, optional thousands commas, optional decimals, optional ``/d``."""
_NOT_AFTER = rf"(?:^|[^{WORD}.])"
"""Where a number may start: not inside a word or right after a dot (``re``'s lookbehind)."""
_NUMBER = compile_pattern(rf"{_NOT_AFTER}({_NUM})")
_WHOLE_NUMBER = compile_pattern(_NUM)
_BAD_COMMA = compile_pattern(rf",({_D}{{4}})")
_HEDGE_WORD = rf"(?:(?:maybe|possibly|perhaps|probably){_S}+)?"
_COMMA = r"[,\x{e000}]"
"""A comma in a list: a comma, or one that ends a number (:func:`_no_bad_commas`)."""
_LIST_SEP = (
    rf"(?:{_S}*{_COMMA}{_S}*(?:and{_S}+|or{_S}+)?|{_S}+or{_S}+|{_S}+and/or{_S}+){_HEDGE_WORD}"
)
# A list of numbers offered as alternatives: "3, 4 or 5", "4, or maybe 5", "3, 4, and 5".
_NUMBER_LIST = compile_pattern(rf"{_NUM}(?:{_LIST_SEP}{_NUM})*")
# Only a list that ends its clause counts, so "2 or 3 ways" in an explanation does not. It
# never crosses a line (its spaces exclude the newline), so it stays inside one sentence.
_L = r"[\t\x{0b}-\r\x{1c}-\x{1f} \x{85}\pZ]"
_LINE_HEDGE = rf"(?:(?:maybe|possibly|perhaps|probably){_L}+)?"
_OR_LIST = compile_pattern(
    rf"{_NOT_AFTER}(?P<list>{_NUM}(?:{_L}*{_COMMA}{_L}*{_NUM})*{_L}*{_COMMA}?{_L}+(?:and/)?or{_L}+"
    rf"{_LINE_HEDGE}{_NUM}){_L}*(?:[.!?,;:)\x{{e000}}]|\n|$)"
)
MAX_LISTS = 32
"""Lists of alternatives, boxes and answer segments read per text for candidate answers
(the first lists, the last boxes and segments); more add no candidate that matters."""
# "The answer is X", "Answer: X", "possible answers: X" -- X runs to the end of the sentence.
# A decimal point is not a sentence end because it is not followed by whitespace. "The answer
# is not X" matches the ``neg`` branch (no segment) and ends there, so a later "answer is Y"
# in the same sentence is still found.
_ANSWER = compile_pattern(
    rf"\b(answers?)\b\**{_S}*(?:(is|are|was|would be|could be|might be|should be|includes?)\b"
    rf"|=|:)(?:(?P<neg>{_S}*\**{_S}*(?:not|never)\b)"
    rf"|{_S}*:?\**{_S}*(?P<segment>.*?)(?:[.!?;](?:{_S}|$)|\n|$))",
    ignore_case=True,
)
_SENTENCE_END = compile_pattern(rf"[.!?]{_S}+|\n")
_LATEX_FRAC = compile_pattern(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_WRAPPERS = ("boxed{", "text{", "textbf{", "mathrm{", "mbox{")
_LATEX_NOISE = compile_pattern(r"\$|\\[()\[\],;!]|\\left|\\right")
_OR_WORD = compile_pattern(r"\bor\b", ignore_case=True)
_TEXT_ALTERNATIVES = compile_pattern(r",|\bor\b|\beither\b", ignore_case=True)


def canonical_number(token: str) -> str | None:
    """Returns the exact value of a number token as a plain string, or None if it is not one.

    Args:
        token: Text such as ``"4.0"``, ``"1,000"``, ``"-3"`` or ``"3/4"``.
    """
    numerator, _, denominator = token.replace(",", "").partition("/")
    try:
        if not denominator and numerator.removeprefix("-").isdecimal():
            return str(int(numerator))  # an integer, the usual case: no Fraction needed
        value = Fraction(numerator) / Fraction(denominator or "1")
    except (ValueError, ZeroDivisionError):
        return None
    if value.denominator == 1:
        return str(value.numerator)
    rest = value.denominator
    for prime in (2, 5):
        while rest % prime == 0:
            rest //= prime
    if rest != 1:  # no finite decimal form (e.g. 1/3): keep it as a fraction
        return f"{value.numerator}/{value.denominator}"
    decimal = Decimal(value.numerator) / Decimal(value.denominator)
    return format(decimal.normalize(), "f")


MAX_LISTED = 32
"""Numbers read from one list of alternatives ("1, 2, 3 or 4"); more are not candidates."""


def numbers(text: str, limit: int = MAX_LISTED) -> list[str]:
    """Returns the first ``limit`` number tokens of ``text``, in order (``"1,000"``, ``"-3"``,
    ``"3/4"``...).

    A number does not start inside a word or right after a dot; thousands commas group
    exactly three digits, and a comma followed by more digits ends the number before it.
    """
    text = _no_bad_commas(text)
    return [m.group(1) or "" for m in islice(_NUMBER.finditer(text), limit)]


NUMBER_WINDOW = 1_000
"""Characters at the end of a text searched for its last number."""
_NUMBER_CHARS = frozenset("-,./")


def _in_number(char: str) -> bool:
    return char.isdecimal() or char in _NUMBER_CHARS


def last_number(text: str) -> str | None:
    """Returns the last number token of the last :data:`NUMBER_WINDOW` characters of
    ``text`` (a number the window cuts is not read), or None."""
    # The last 200 characters first: a reply of numbers costs a few matches, not hundreds.
    return _last_number(text, 200) or _last_number(text, NUMBER_WINDOW)


def _last_number(text: str, window: int) -> str | None:
    base = max(0, len(text) - window - 1)
    tail = _no_bad_commas(
        text[base:]
    )  # with one character before the window: a number's left context
    first = 0
    if base:
        first = 1
        while first < len(tail) and _in_number(tail[first - 1]) and _in_number(tail[first]):
            first += 1  # the window starts inside a run of number characters: skip it
    found = None
    for match in _NUMBER.finditer(tail):
        if match.start(1) >= first:
            found = match.group(1) or ""
    return found


def _no_bad_commas(text: str) -> str:
    """``text`` with every comma followed by four digits made U+E000 (same length): such a
    comma ends a number, as a lookahead ``(?!\\d)`` would have it, and still
    separates a list of alternatives."""
    # A function, not a template: the binding's templates mangle non-ASCII characters.
    return _BAD_COMMA.sub(_mark, text) if "," in text else text


def _mark(match: Match) -> str:
    return f"\ue000{match.group(1)}"


def is_numeric(answer: str) -> bool:
    """Returns True when a canonical answer is a number rather than words."""
    return _WHOLE_NUMBER.fullmatch(answer) is not None


def normalise_text(text: str) -> str:
    """Returns text lowercased, without punctuation, with single spaces."""
    return " ".join(text.lower().translate(PUNCTUATION_TO_SPACE).split())


def _unwrap(text: str) -> str:
    r"""``text`` with every ``\boxed{x}``, ``\text{x}`` (``\textbf``, ``\mathrm``, ``\mbox``)
    replaced by ``x`` when ``x``, its own wrappers unwrapped, holds no brace: one pass with a
    stack of open braces (repeating a substitution to a fixpoint is quadratic on nesting)."""
    if "}" not in text:  # nothing is closed, nothing unwrapped
        return text
    wrappers: dict[int, int] = {}  # index of a wrapper's "{" -> where its backslash is
    at = text.find("\\")
    while at >= 0:
        name = next((w for w in _WRAPPERS if text.startswith(w, at + 1)), None)
        if name is not None:
            wrappers[at + len(name)] = at
        at = text.find("\\", at + 1)
    if not wrappers:
        return text
    drop: list[tuple[int, int]] = []  # (start, end) spans removed from the text
    stack: list[tuple[int, bool]] = []  # (index of "{", content clean so far)
    for index in _braces(text):
        if text[index] == "{":
            stack.append((index, True))
        elif stack:
            opened, clean = stack.pop()
            start = wrappers.get(opened)
            if start is not None and clean:
                drop.append((start, opened + 1))
                drop.append((index, index + 1))
            elif stack:
                stack[-1] = (stack[-1][0], False)  # a brace stays inside the parent
    if not drop:
        return text
    drop.sort()
    pieces, last = [], 0
    for start, end in drop:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _braces(text: str) -> Iterator[int]:
    """The index of every ``{`` and ``}`` of ``text``, in order: ``str.find`` skips the
    characters between them at C speed (a Python loop over each character would be slow)."""
    opening, closing = text.find("{"), text.find("}")
    while opening >= 0 or closing >= 0:
        if closing < 0 or 0 <= opening < closing:
            yield opening
            opening = text.find("{", opening + 1)
        else:
            yield closing
            closing = text.find("}", closing + 1)


def strip_latex(text: str) -> str:
    """Returns text with common LaTeX answer markup replaced by plain text.

    ``\\frac{3}{4}`` becomes ``3/4``; ``\\boxed{x}`` and ``\\text{x}`` become ``x``; ``$`` goes.
    """
    text = text.replace("\u2019", "'").replace("\u2212", "-")
    text = _unwrap(_LATEX_FRAC.sub(r"\1/\2", text))
    return _LATEX_NOISE.sub(" ", text)


def canonical_answer(segment: str) -> str | None:
    """Returns the canonical form of one answer: its first number, else its normalised words.

    Args:
        segment: The text given as an answer, e.g. ``"x = 3"``, ``"12.5 metres"``, ``"Paris."``.
    """
    candidates = segment_candidates(segment)
    return candidates[0] if candidates else None


def segment_candidates(segment: str) -> list[str]:
    """Returns the alternatives offered in one answer segment, canonical and in order.

    ``"4 or 5"`` gives ``["4", "5"]``; ``"12 because 3 x 4 = 12"`` gives ``["12"]`` (only the
    list of numbers at the first number counts); ``"Paris or London"`` gives
    ``["paris", "london"]``; ``"Paris"`` gives ``["paris"]``.
    """
    clean = strip_latex(segment)
    first = _NUMBER.search(marked := _no_bad_commas(clean))
    if first is not None:
        number_list = _NUMBER_LIST.match(marked, first.start(1))
        listed = number_list.group() if number_list else first.group(1)
        return _distinct(canonical_number(token) for token in numbers(listed or ""))
    if _OR_WORD.search(clean):
        return _distinct(normalise_text(part) for part in _split(_TEXT_ALTERNATIVES, clean))
    return _distinct([normalise_text(clean)])


def boxed_contents(text: str) -> list[str]:
    r"""Returns the contents of every ``\boxed{...}`` in the text's last :data:`ANSWER_WINDOW`
    characters, in order, nested braces included; an unclosed one is skipped."""
    text = text[-ANSWER_WINDOW:]
    if "}" not in text:  # no box is closed
        return []
    opens = set()  # index of each box's "{"
    at = text.find("\\boxed")
    while at >= 0:
        brace = at + 6
        while brace < len(text) and text[brace].isspace():
            brace += 1
        if brace < len(text) and text[brace] == "{":
            opens.add(brace)
        at = text.find("\\boxed", at + 6)
    if not opens:
        return []
    found: list[tuple[int, str]] = []
    stack: list[int] = []
    for index in _braces(text):
        if text[index] == "{":
            stack.append(index)
        elif stack:
            opened = stack.pop()
            if opened in opens:
                found.append((opened, text[opened + 1 : index]))
    return [content for _, content in sorted(found)]


def answer_segments(text: str) -> list[str]:
    """Returns what follows every "answer is" / "answer:" / "answers are" in the text's last
    :data:`ANSWER_WINDOW` characters, in order ("the answer is not X" gives none)."""
    text = text[-ANSWER_WINDOW:]
    segments: list[str] = []
    matches = _ANSWER.finditer(text)
    while (match := next(matches, None)) is not None:
        # RE2's \b is ASCII: "éanswer" or "answeré" holds no word boundary for Python's.
        # Such a match is no answer; search again just after its start (rare: a restart).
        edges = [(match.start(1) - 1, match.start(1)), (match.end(1) - 1, match.end(1))]
        if match.start(2) >= 0:
            edges.append((match.end(2) - 1, match.end(2)))
        if any(_word_edge(text, a, b) for a, b in edges):
            matches = _ANSWER.finditer(text, match.start(1) + 1)
            continue
        segment = (match.group("segment") or "").strip()
        if segment:
            segments.append(segment)
    return segments


def _word_edge(text: str, before: int, after: int) -> bool:
    """Whether both characters around an RE2 ``\\b`` are word characters (for Python)."""
    return before >= 0 and after < len(text) and _word(text[before]) and _word(text[after])


def _trailing_equation(line: str) -> str | None:
    """What follows the last ``=`` of ``line``, without its final dot and whitespace."""
    if "=" not in line:
        return None
    value = line.rpartition("=")[2].strip()
    return value.removesuffix(".").rstrip() if value else None


def extract_final_answer(text: str) -> str | None:
    r"""Returns the canonical final answer of a response or reference, or None if text is empty.

    Reads the last :data:`ANSWER_WINDOW` characters. Tried in order, the first that finds
    something wins:

    1. the last ``\boxed{...}``;
    2. the last "answer is X" / "answer: X" (its first alternative);
    3. "= X" at the end of the last non-empty line;
    4. the last number in the last :data:`NUMBER_WINDOW` characters;
    5. the last non-empty line, normalised (lowercase, no punctuation).
    """
    text = text[-ANSWER_WINDOW:]
    boxed = boxed_contents(text)
    if boxed:
        return canonical_answer(boxed[-1])
    segments = answer_segments(text)
    if segments:
        return canonical_answer(segments[-1])
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    equation = _trailing_equation(lines[-1])
    if equation and canonical_answer(equation):
        return canonical_answer(equation)
    found = last_number(strip_latex(text))
    if found:
        return canonical_number(found)
    return normalise_text(lines[-1]) or None


def _split(pattern: Pattern, text: str) -> list[str]:
    """``text`` cut at every match of ``pattern``, the matches dropped."""
    pieces, last = [], 0
    for match in pattern.finditer(text):
        pieces.append(text[last : match.start()])
        last = match.end()
    pieces.append(text[last:])
    return pieces


def _in_question(text: str, start: int) -> bool:
    """Whether the sentence holding ``start`` ends with ``?`` (a sentence ends after a
    ``.``/``!``/``?`` followed by whitespace, or at a newline)."""
    end = _SENTENCE_END.search(text, start)
    stop = len(text) if end is None else end.start() + (text[end.start()] != "\n")
    return text[start:stop].rstrip().endswith("?")


def find_candidate_answers(text: str) -> list[str]:
    r"""Returns every distinct final answer the text offers, canonical, without repeats.

    Reads the last :data:`ANSWER_WINDOW` characters. Candidates come from every
    ``\boxed{...}`` (one each), every "answer is X" / "answers: X, Y" segment (each
    alternative in it), and every number list joined by "or" that ends its clause ("either
    3, 4 or 5.") in a sentence that is not a question (so "Is it 4 or 5?" asked while
    reasoning does not count). Known limit: a tuple answer such as "(2, 3)" in an answer
    segment reads as two candidates.
    """
    text = text[-ANSWER_WINDOW:]
    # A box, segment or list repeated (a repetition loop) gives the candidates it gave the
    # first time: each distinct one is read once (the same result, in the same order).
    boxes = dict.fromkeys(boxed_contents(text)[-MAX_LISTS:])
    found = _distinct(canonical_answer(box) for box in boxes)
    for segment in dict.fromkeys(answer_segments(text)[-MAX_LISTS:]):
        found.extend(segment_candidates(segment))
    clean = _no_bad_commas(strip_latex(text))
    lists: set[str] = set()
    for match in islice(_OR_LIST.finditer(clean), MAX_LISTS):
        listed = match.group(1) or ""
        if listed not in lists and not _in_question(clean, match.start(1)):
            lists.add(listed)
            found.extend(_distinct(canonical_number(token) for token in numbers(listed)))
    return _distinct(found)


def answers_match(answer: str, reference: str) -> bool:
    """Returns True when a canonical answer agrees with the canonical reference answer.

    Numbers must be equal. A worded reference also matches when its words appear whole in the
    answer, so "the capital of france is paris" matches the reference "paris".
    """
    if answer == reference:
        return True
    if is_numeric(reference) or not reference:
        return False
    start = 0
    while (found := answer.find(reference, start)) >= 0:
        end = found + len(reference)
        before = answer[found - 1] if found else " "
        after = answer[end] if end < len(answer) else " "
        # ``\\b`` on both sides: a word character on exactly one side of each edge.
        if _word(before) != _word(reference[0]) and _word(after) != _word(reference[-1]):
            return True
        start = found + 1
    return False


def _word(char: str) -> bool:
    """Whether ``char`` is a word character (Python's ``\\w``)."""
    return char.isalnum() or char == "_"


def _distinct(items: Iterable[str | None]) -> list[str]:
    """Returns the non-empty items without repeats, first occurrence first."""
    return list(dict.fromkeys(item for item in items if item))
