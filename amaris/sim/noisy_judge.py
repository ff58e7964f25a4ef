"""An honest but noisy audit judge for ``amaris simulate --scenario judge-drift|steady``.

A real auditor is another model: it agrees with the truth as well as the training judge
does, yet reads some criteria differently from it on some replies. Were the auditor the
same judge as the scorer, the two would agree on every verdict outside a drift and the
scenario's "no false alarm" would hold by construction. So the simulator serves the
auditor through this judge: the offline judge's verdicts (the truth the simulated policy
is measured against), each read the other way (a met criterion unmet, a present pitfall
absent, and the reverse) with probability ``rate``.

The draw for a verdict is a hash of the seed, the reply and the criterion's text, not a
stream of random numbers: a reply re-graded gets the same verdicts whatever the order the
requests arrive in, and a run is repeatable from its seed. The draws of two criteria, or
of two replies, are independent. The default rate, 0.1, is the disagreement between two
LLM graders on a binary rubric criterion that published comparisons of LLM and expert
graders report (agreement of 80-90% per criterion); it is the auditor's own noise, on top
of which the scorer's drift must show.
"""

from __future__ import annotations

import hashlib
import struct

from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.sim.judge_server import (
    FaultProfile,
    Reply,
    offline_responder,
    scorer_request,
)
from amaris.sim.wire import ChatRequest

DEFAULT_RATE = 0.1
"""Share of verdicts the noisy auditor reads the other way (see the module's text)."""
_MIDDLE = (SCALE_MIN + SCALE_MAX) / 2


def disagrees(seed: int, output: str, criterion: str, rate: float) -> bool:
    """Whether the noisy judge reads ``criterion`` the other way on ``output``: a draw,
    uniform in [0, 1), below ``rate``, the draw a hash of the three."""
    digest = hashlib.blake2b(digest_size=8)
    for part in (str(seed), output, criterion):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(struct.pack(">Q", len(data)))
        digest.update(data)
    draw = int.from_bytes(digest.digest(), "big") / 2.0**64
    return draw < rate


def read_other_way(score: int) -> int:
    """A verdict read the other way: a score in the lower half of the scale becomes the
    scale's top, one in the upper half (or the middle) its bottom."""
    return SCALE_MAX if score < _MIDDLE else SCALE_MIN


class NoisyJudge:
    """The offline judge, reading each scorer verdict the other way with probability
    ``rate`` (seeded by ``seed``); other agents' requests are answered honestly."""

    def __init__(self, seed: int, rate: float = DEFAULT_RATE) -> None:
        if not 0 <= rate <= 1:
            raise ValueError(f"the noisy judge's rate must be in [0, 1], not {rate}")
        self.seed = seed
        self.rate = rate
        self.verdicts = 0
        """Scorer verdicts given so far."""
        self.flipped = 0
        """Of them, read the other way."""
        self._honest = offline_responder(FaultProfile(seed=seed))

    def noisy(self, body: ChatRequest) -> str | None:
        """The verdicts of a scorer request, some read the other way; None for a request
        that is not a scorer's (answered honestly)."""
        ask = scorer_request(body)
        if ask is None:
            return None
        changed: dict[int, tuple[str | None, int]] = {}
        for i, ((text, _), (_, _, score)) in enumerate(zip(ask.criteria, ask.honest, strict=True)):
            self.verdicts += 1
            if disagrees(self.seed, ask.output, text, self.rate):
                self.flipped += 1
                changed[i] = ("read the other way by the noisy auditor", read_other_way(score))
        return ask.answer(changed)

    async def __call__(self, body: ChatRequest) -> Reply:
        content = self.noisy(body)
        if content is None:
            return await self._honest(body)
        return Reply(content=content)
