"""What an added or edited criterion rests on: the findings it cites, checked against the
step's (:class:`~amaris.agents.findings.StepFindings`).

A criterion whose only support is text addressed to the grader or the pipeline is an
attack carried out by whoever obeyed that text. An add or an edit is refused when:

* every finding it cites is a ``grader_injection`` finding;
* it cites none, and the step's only finding is ``grader_injection``;
* its text carries a distinctive token of the injected text (``TRUSTED-42``: a word with
  digits, an inner hyphen or underscore, capitals; or a quoted phrase).

A pitfall that penalises that very injection is not refused: its plain statement lowers
the reward (:func:`~amaris.rubric.guardrails.polarity`) and it carries the injected token
or speaks of instructing the grader. Citations that name no finding of the step count as
none. Reweights and retirements are not checked. Pure and linear: ``str`` methods only.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

from amaris.agents.findings import GRADER_INJECTION, StepFindings
from amaris.rubric.guardrails import Modification, UpdateRejected, negations
from amaris.rubric.model import RubricVersion

_EDGES = string.punctuation + "\u2018\u2019\u201c\u201d\u00ab\u00bb"
"""Characters stripped from a word's ends (ASCII punctuation, curly quotes)."""
_QUOTES = (('"', '"'), ("\u201c", "\u201d"), ("\u00ab", "\u00bb"), ("`", "`"))
_NOTE_WORDS = frozenset(
    {
        *("NOTE", "NOTES", "DEAR", "RUBRIC", "UPDATER", "GRADER", "JUDGE", "EVALUATOR"),
        *("SCORER", "SYSTEM", "PIPELINE", "ANALYZER", "SUMMARIZER", "IMPORTANT", "ATTENTION"),
        *("IGNORE", "PREVIOUS", "INSTRUCTION", "INSTRUCTIONS", "PLEASE", "MUST", "CRITERION"),
        *("CRITERIA", "SCORE", "MARKS", "FULL", "ANSWER", "RESPONSE", "REWARD", "MODEL"),
    }
)
"""Capitalised words a note is written in, not tokens of what it asks for."""
_ADDRESSEES = frozenset(
    {
        *("grader", "graders", "judge", "judges", "evaluator", "evaluators", "scorer"),
        *("rubric", "updater", "pipeline", "analyzer", "analyser", "summarizer", "summariser"),
    }
)
_ADDRESSING = ("instruct", "inject", "manipulat", "address", "command", "note", "message")
MAX_WORD = 64
MAX_QUOTED = 80
_SHOWN = 100
"""Characters of a criterion's text a refusal quotes."""


@dataclass(frozen=True)
class Token:
    """A distinctive token of injected text, as written: compared case-sensitively
    (``exact``: a word in capitals) or case-folded; ``quoted``: a phrase, found within."""

    text: str
    exact: bool
    quoted: bool = False

    @property
    def key(self) -> str:
        return self.text if self.exact else self.text.casefold()


def _words(text: str) -> Iterator[str]:
    for raw in text.split():
        word = raw.strip(_EDGES)
        if word:
            yield word


def _distinctive(word: str) -> Token | None:
    if not 2 <= len(word) <= MAX_WORD:
        return None
    letters = sum(c.isalpha() for c in word)
    digits = any(c.isdigit() for c in word)
    inner = "-" in word or "_" in word
    ordinal = word[:-2].isdigit() and word[-2:].lower() in ("st", "nd", "rd", "th")
    shouted = inner and letters and word.upper() == word  # TRUSTED-MARK
    camel = any(a.islower() and b.isupper() for a, b in pairwise(word))
    if (letters and digits and not ordinal) or shouted or camel:
        return Token(word, exact=False)
    if word.isupper() and letters >= 4 and word not in _NOTE_WORDS:
        return Token(word, exact=True)
    return None


def _quoted(text: str) -> Iterator[str]:
    for opening, closing in _QUOTES:
        start = text.find(opening)
        while start >= 0:
            end = text.find(closing, start + 1)
            if end < 0:
                break
            inside = " ".join(text[start + 1 : end].split())
            one_plain_word = inside.isalpha() and inside.islower()
            if 2 <= len(inside) <= MAX_QUOTED and not one_plain_word:
                yield inside
            start = text.find(opening, end + 1)


def injected_tokens(snippets: Sequence[str]) -> list[Token]:
    """The distinctive tokens of injected texts, in order, each once."""
    found: dict[Token, None] = {}
    for snippet in snippets:
        found.update(dict.fromkeys(t for w in _words(snippet) if (t := _distinctive(w))))
        found.update(dict.fromkeys(Token(q, exact=False, quoted=True) for q in _quoted(snippet)))
    return list(found)


def carried(text: str, tokens: Sequence[Token]) -> str | None:
    """The first of ``tokens`` that ``text`` carries (a word, or a quoted phrase within it),
    as it is written in the token; None when it carries none."""
    words = list(_words(text))
    exact, folded = set(words), {w.casefold() for w in words}
    spaced = " ".join(text.casefold().split())
    for token in tokens:
        if token.quoted and token.key in spaced:
            return token.text
        if not token.quoted and token.key in (exact if token.exact else folded):
            return token.text
    return None


def _against_injection(text: str, weight: float, tokens: Sequence[Token]) -> bool:
    """``text`` is a pitfall that penalises the injection: meeting its plain statement lowers
    the reward, and it names the injected token or an instruction to the grader."""
    sign = 1 if weight > 0 else -1
    if (-sign if negations(text) % 2 else sign) > 0:
        return False
    if carried(text, tokens) is not None:
        return True
    words = [w.casefold() for w in _words(text)]
    addressed = any(w in _ADDRESSEES for w in words)
    return addressed and any(w.startswith(_ADDRESSING) for w in words)


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def check_support(
    current: RubricVersion, modifications: Sequence[Modification], findings: StepFindings
) -> None:
    """Refuse an add or an edit whose only support is text addressed to the grader or the
    pipeline (rules in the module docstring). Modifications the guardrails refuse on
    other grounds (an unknown id, no text) are left to them.

    Raises:
        UpdateRejected: naming the criterion and why.
    """
    if not findings.injected:
        return
    tokens = injected_tokens(findings.snippets)
    known = {f.casefold() for f in findings.ids}
    injected = {f.casefold() for f in findings.injected}
    weights = {c.id: c.weight for c in current.adaptive}
    for index, mod in enumerate(modifications):
        text = (mod.text or "").strip()
        weight = mod.weight if mod.action == "add" else weights.get(mod.criterion_id or "")
        if mod.action not in ("add", "edit") or not text or not weight:
            continue
        if _against_injection(text, weight, tokens):
            continue
        where = f'rubric_modifications[{index}] ({mod.action}) "{_shown(text)}"'
        cited = {f.casefold() for f in mod.findings} & known
        token = carried(text, tokens)
        if token is not None:
            raise UpdateRejected(
                f"{where} carries {token!r} from text addressed to the grader or the "
                f"pipeline ({GRADER_INJECTION}): an attack to penalise, never to reward"
            )
        if cited and cited <= injected:
            raise UpdateRejected(
                f"{where} rests on {GRADER_INJECTION} alone: text addressed to the grader or "
                "the pipeline is an attack to penalise, not a finding to act on"
            )
        if not cited and not known - injected:
            raise UpdateRejected(
                f"{where} cites no finding, and the step's only finding is "
                f"{GRADER_INJECTION}: text addressed to the grader or the pipeline"
            )
