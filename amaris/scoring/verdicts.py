"""Sharper verdicts: expected values from token logprobs, and k sampled verdicts combined;
and how sure a judge was of each verdict (the cascade's confidence).

Both are opt-in (``agents.scorer.logprobs``, ``agents.scorer.samples``). A verdict on the
integer scale is a coarse reward: in a GRPO group whose responses all meet a criterion, every
verdict is 4 and the group's rewards have no variance, so it teaches nothing. The judge's
probabilities over the score tokens (its expected score) and the mean of several sampled
verdicts both separate responses the argmax lumps together.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from amaris.llm.gateway import INLINE_PARSE_CHARS
from amaris.llm.providers import TokenLogprob
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.text.offload import off_loop_above

_SCORE_KEY = "score"
_MAX_SCORE_DIGITS = len(str(SCALE_MAX))
_MAX_LOGPROB = 1e-3
"""Largest logprob taken as a log probability: 0 (a sure token) and float rounding above
it; a larger value is no probability (``judge_invalid_logprobs``)."""


class LogprobsError(ValueError):
    """A logprob the expected score would read is not a log probability (NaN, +Infinity,
    above 0): the reply's numbers cannot be trusted, so neither can its verdicts."""


def _score_token(text: str, start: int) -> int | None:
    """The score a token spells from ``start``: optional whitespace, then an integer of
    at most the scale's digits, then nothing or a non-digit (``4``, `` 4``, ``4}`` in
    tokenizers that merge the digit with what follows); None otherwise. One pass over at
    most the token's leading whitespace and a few digits."""
    index, end = start, len(text)
    while index < end and text[index].isspace():
        index += 1
    first = index
    while index < end and "0" <= text[index] <= "9":
        index += 1
        if index - first > _MAX_SCORE_DIGITS:
            return None
    return int(text[first:index]) if index > first else None


def _probability(logprob: float) -> float:
    """``exp(logprob)``.

    Raises:
        LogprobsError: ``logprob`` is NaN or above :data:`_MAX_LOGPROB` (+Infinity too).
    """
    if math.isnan(logprob) or logprob > _MAX_LOGPROB:
        raise LogprobsError(f"logprob {logprob!r} is not a log probability (at most 0)")
    return math.exp(min(logprob, 0.0))


def _score_offsets(text: str, start: int) -> list[int]:
    """Offsets in ``text`` (from ``start``) of the first character of every ``"score"`` key's
    value, in order. A small JSON scanner: keys and values inside strings (a reason quoting
    ``"score": 4``) are skipped, whatever the order of the fields."""
    offsets: list[int] = []
    in_string = escaped = False
    string_start = 0
    last_string: str | None = None
    awaiting_value = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                last_string = text[string_start:index]
            continue
        if char.isspace():
            continue
        if awaiting_value:
            offsets.append(index)
            awaiting_value = False
        if char == '"':
            in_string, string_start = True, index + 1
            continue
        if char == ":" and last_string == _SCORE_KEY:
            awaiting_value = True
        last_string = None
    return offsets


def _distribution(token: TokenLogprob, prefix: str) -> dict[int, float] | None:
    """Probabilities of the scale's scores at one token position, from its alternatives
    that read ``prefix`` then a score (renormalised over those); None without any."""
    candidates = dict(token.top)
    candidates.setdefault(token.token, token.logprob)
    mass: dict[int, float] = {}
    for text, logprob in candidates.items():
        if not text.startswith(prefix):
            continue
        score = _score_token(text, len(prefix))
        if score is not None and SCALE_MIN <= score <= SCALE_MAX:
            mass[score] = mass.get(score, 0.0) + _probability(logprob)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {score: p / total for score, p in mass.items()}


def expected_scores(
    tokens: Sequence[TokenLogprob], answer: str, verdicts: Sequence[float]
) -> list[float] | None:
    """Expected value over the score tokens of each verdict of ``answer``, in order: the
    means of :func:`score_distributions` (None when it is None).

    Raises:
        LogprobsError: a logprob read at a score position is NaN, +Infinity or above 0.
    """
    found = score_distributions(tokens, answer, verdicts)
    return None if found is None else [expected_value(d) for d in found]


def expected_value(distribution: dict[int, float]) -> float:
    """The mean score of a distribution over the scale."""
    return sum(score * p for score, p in distribution.items())


def margin(distribution: dict[int, float]) -> float:
    """How sure the judge was of a verdict: the probability of its most likely score less
    that of the next (1: sure; 0: a tie)."""
    top = sorted(distribution.values(), reverse=True)
    return top[0] - (top[1] if len(top) > 1 else 0.0)


def score_distributions(
    tokens: Sequence[TokenLogprob], answer: str, verdicts: Sequence[float]
) -> list[dict[int, float]] | None:
    """The judge's probabilities over the scale for each verdict of ``answer``, in order.

    ``tokens`` are the completion's (reasoning included, if the model wrote it inline);
    ``answer`` is the JSON the verdicts were read from and ``verdicts`` their scores, in
    the answer's order. Each ``"score":`` value is found by walking the tokens' text, so
    the order of the fields does not matter.

    Returns:
        One distribution per verdict, or None when the logprobs cannot be matched to
        the answer (not found in the tokens, another count of scores, a chosen token that
        is not the verdict's score, or no score among a position's alternatives).


    Raises:
        LogprobsError: a logprob read at a score position is NaN, +Infinity or above 0.
    """
    text = "".join(t.token for t in tokens)
    body = answer.strip()
    start = text.rfind(body) if body else -1
    if start < 0:
        return None
    offsets = _score_offsets(text[: start + len(body)], start)
    if len(offsets) != len(verdicts):
        return None
    ends = []
    position = 0
    for token in tokens:
        position += len(token.token)
        ends.append(position)
    found: list[dict[int, float]] = []
    index = 0
    for offset, verdict in zip(offsets, verdicts, strict=True):
        while ends[index] <= offset:
            index += 1
        token = tokens[index]
        prefix = token.token[: offset - (ends[index] - len(token.token))]
        distribution = _distribution(token, prefix)
        chosen = _score_token(token.token, len(prefix))
        if distribution is None or chosen is None or chosen != verdict:
            return None
        found.append(distribution)
    return found


@dataclass(frozen=True)
class Combined:
    """k verdicts on one criterion, combined."""

    mean: float
    """The criterion's verdict: the mean of the k verdicts (a single verdict as it is, so
    a plain verdict stays an integer)."""
    agreement: float
    """Share of the k verdicts that round to the most common rounded value (1 = unanimous)."""


def combine(values: Sequence[float]) -> Combined:
    """The mean of ``values`` and their agreement.

    Raises:
        ValueError: no values.
    """
    if not values:
        raise ValueError("no verdicts to combine")
    rounded = Counter(round(v) for v in values)
    return Combined(
        mean=values[0] if len(values) == 1 else sum(values) / len(values),
        agreement=rounded.most_common(1)[0][1] / len(values),
    )


def criterion_confidence(margins: Sequence[float], samples: int, agreement: float) -> float:
    """How sure the judge was of one criterion's verdict over its ``samples`` replies: the
    mean logprob :func:`margin` when every reply's logprobs were read (``margins``, one a
    reply), else the samples' agreement when there are several, else 0 (no signal)."""
    if margins and len(margins) == samples:
        return sum(margins) / len(margins)
    return agreement if samples > 1 else 0.0


async def distributions_off_loop(
    tokens: tuple[TokenLogprob, ...], answer: str, values: list[float]
) -> list[dict[int, float]] | None:
    """:func:`score_distributions` of a reply, on the event loop when the reply is short,
    else on amaris's text thread (its scan is a Python loop over every character).

    Raises:
        LogprobsError: a logprob at a score position is no log probability.
    """
    return await off_loop_above(
        len(answer), INLINE_PARSE_CHARS, score_distributions, tokens, answer, values
    )
