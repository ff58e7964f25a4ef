"""The offline judge's doubt: sampled verdicts and token logprobs, seeded.

The rules give each criterion one verdict ``m`` (:mod:`amaris.offline.heuristics`). To show
offline what ``agents.scorer.samples`` and ``agents.scorer.logprobs`` do, the scorer's
answer can also carry a distribution over the scale, as an LLM judge's would:

* the judge's **doubt** ``d`` on a (criterion, response) pair is ``DOUBT_MAX * u``, with
  ``u`` in [0, 1) read from a SHA-256 of the seed, the criterion id and text and the
  response; a second digest bit picks the neighbouring score the doubt goes to (``m - 1``
  or ``m + 1``; at an end of the scale, the only neighbour);
* ``P(m) = 1 - d``, ``P(neighbour) = d``: the argmax is always the rules' verdict, and the
  expected score is ``m -/+ d``;
* at a temperature above 0, each verdict is **sampled** from that distribution. The i-th
  identical request (same messages) draws with ``Random(seed/digest/i)``, so k identical
  calls give the same k verdicts in any order and in any run;
* with logprobs asked for, the answer comes as tokens (the score digits one token each)
  with ``top_logprobs`` holding the distribution at each score token.

The doubt stands in for an LLM judge's uncertainty: it is pseudo-random, not a measure of
the response. At temperature 0 without logprobs the answer is the rules' verdicts, as
always.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import TypedDict, cast

from amaris.agents.payloads import ScorerAnswer, ScorerData
from amaris.agents.prompts import read_data
from amaris.offline.heuristics import judge_criteria
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.text.chars import SPACE, SPACE_CHARS, WORD, compile_pattern

DOUBT_MAX = 0.45
"""Largest probability the offline judge puts on a neighbouring score (below 0.5, so the
rules' verdict stays the most likely)."""
_REMEMBERED = 65_536
"""Distinct requests whose draw count is kept (least recently seen forgotten first)."""
# Runs of spaces, of word characters, or one other character (RE2: the reply quotes the
# policy's text).
_TOKENS = compile_pattern(rf"{SPACE}+|[{WORD}]+|[^{WORD}{SPACE_CHARS}]")


class TopLogprob(TypedDict):
    """A token and its log probability, as chat completions give them."""

    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    """A token of ``choices[0].logprobs.content``, with its ``top_logprobs``."""

    top_logprobs: list[TopLogprob]


@dataclass(frozen=True)
class SampledReply:
    """The scorer's answer, and its tokens' logprobs in the chat-completions shape
    (``choices[0].logprobs.content``) when asked for."""

    content: str
    logprobs: list[TokenLogprob] | None = None


def _token(
    text: str,
    logprob: float,
    top: list[tuple[str, float]] | None = None,
) -> TokenLogprob:
    alternatives = top if top is not None else [(text, logprob)]
    return {
        "token": text,
        "logprob": logprob,
        "bytes": list(text.encode()),
        "top_logprobs": [
            {"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in alternatives
        ],
    }


def _text_tokens(text: str) -> list[TokenLogprob]:
    """Tokens of text the judge is sure of (log probability 0)."""
    return [_token(piece, 0.0) for piece in (m.group() or "" for m in _TOKENS.finditer(text))]


class VerdictSampler:
    """Answers scorer requests with the offline judge's doubt (see the module docstring)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._draws: OrderedDict[str, int] = OrderedDict()

    def distribution(
        self, criterion_id: str, criterion: str, output: str, verdict: int
    ) -> dict[int, float]:
        """The offline judge's probabilities over the scale for one criterion."""
        digest = hashlib.sha256(
            f"{self.seed}\x00{criterion_id}\x00{criterion}\x00{output}".encode(
                "utf-8", "surrogatepass"
            )
        ).digest()
        doubt = DOUBT_MAX * int.from_bytes(digest[:8], "big") / 2**64
        if verdict <= SCALE_MIN:
            neighbour = verdict + 1
        elif verdict >= SCALE_MAX:
            neighbour = verdict - 1
        else:
            neighbour = verdict + (1 if digest[8] & 1 else -1)
        if doubt == 0.0:
            return {verdict: 1.0}
        return {verdict: 1.0 - doubt, neighbour: doubt}

    def reply(
        self, messages: list[dict[str, str]], temperature: float, logprobs: bool, top_logprobs: int
    ) -> SampledReply | None:
        """The scorer's answer with sampled verdicts and/or logprobs; None when the
        messages are not a scorer request or neither is asked for (the plain offline
        judge answers then)."""
        if temperature <= 0 and not logprobs:
            return None  # before reading the data: the plain judge reads it (once) then
        data = _scorer_data(messages)
        if data is None:
            return None
        rollout = data["rollout"]
        output = str(rollout.get("output") or "")
        criteria = [(str(c["id"]), str(c["text"])) for c in data["criteria"]]
        rules = judge_criteria(
            criteria,
            input=str(rollout.get("input") or ""),
            output=output,
            reference=rollout.get("supplemental_context") or None,
        )
        rng = self._rng(messages) if temperature > 0 else None
        items: list[tuple[str, str, int, dict[int, float]]] = []
        for (cid, text), verdict in zip(criteria, rules, strict=True):
            distribution = self.distribution(cid, text, output, verdict.score)
            score = verdict.score
            if rng is not None:
                draw, acc = rng.random(), 0.0
                for value, p in sorted(distribution.items()):
                    acc += p
                    if draw < acc:
                        score = value
                        break
            items.append((cid, verdict.reason, score, distribution))
        answer: ScorerAnswer = {
            "verdicts": [
                {"id": cid, "reason": reason, "score": score} for cid, reason, score, _ in items
            ]
        }
        content = json.dumps(answer, ensure_ascii=False)
        if not logprobs:
            return SampledReply(content)
        tokens = _text_tokens('{"verdicts": [')
        for index, (cid, reason, score, distribution) in enumerate(items):
            head = (
                f'{", " if index else ""}{{"id": {json.dumps(cid, ensure_ascii=False)}, '
                f'"reason": {json.dumps(reason, ensure_ascii=False)}, "score": '
            )
            tokens += _text_tokens(head)
            top = sorted(
                ((str(v), math.log(p)) for v, p in distribution.items()), key=lambda t: -t[1]
            )[: max(1, top_logprobs)]
            tokens.append(_token(str(score), math.log(distribution[score]), top))
            tokens += _text_tokens("}")
        tokens += _text_tokens("]}")
        return SampledReply(content, tokens)

    def _rng(self, messages: list[dict[str, str]]) -> random.Random:
        digest = hashlib.sha256(
            json.dumps(messages, sort_keys=True).encode("utf-8", "surrogatepass")
        ).hexdigest()
        draw = self._draws.pop(digest, 0)
        self._draws[digest] = draw + 1
        while len(self._draws) > _REMEMBERED:
            self._draws.popitem(last=False)
        return random.Random(f"{self.seed}/{digest}/{draw}")


def _scorer_data(messages: list[dict[str, str]]) -> ScorerData | None:
    """The scorer's data (its context block's criteria and its data block's rollout,
    :func:`amaris.agents.prompts.read_data`); None for another agent's messages."""
    try:
        data = read_data(messages)
    except ValueError:
        return None
    # The scorer's blocks as amaris.scoring.judge_protocol writes them (see judge._answer).
    return cast(ScorerData, data) if data.get("agent") == "scorer" else None
