"""``amaris simulate --scenario cascade``: a cheap judge that is sometimes wrong and mostly
knows when, in front of the simulator's judge (the strong one); ``cascade.json``.

The cheap judge reads each criterion as the offline judge does (the truth here), but reads
it the other way with probability :data:`ERROR_RATE` (with
:func:`~amaris.sim.noisy_judge.read_other_way`), and puts a probability on the score it
gives, sent as the score token's logprobs (the rest on the other reading): sure (in
[:data:`SURE_FROM`, 1)) on :data:`SURE_WHEN_RIGHT` of the verdicts it reads right and on
:data:`SURE_WHEN_WRONG` of those it reads wrong, unsure (in [0.5, :data:`SURE_FROM`))
otherwise. The margin of its logprobs is so a signal that correlates with being right,
imperfectly: a sure verdict is wrong now and then, and an unsure one is right about as
often as not (and, right, its expected score is off the strong judge's). Each draw is a
hash of the seed, the reply and the criterion, so a run is repeatable and the order of
requests does not matter.

What the run is measured against, strong-only rewards, is the strong judge's verdict on
every judged criterion of every rollout under the rubric version that scored it: the
offline judge's rules on the logged rollout (:func:`strong_only_reward`), computed here,
outside the counted calls.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from amaris.llm.ledger import Key, Usage
from amaris.memory.records import RolloutRecord
from amaris.offline.heuristics import judge_criterion
from amaris.offline.sampling import TokenLogprob, TopLogprob
from amaris.rubric.aggregate import aggregate
from amaris.settings import AGENTS
from amaris.sim.driver import RunResult
from amaris.sim.judge_server import FaultProfile, Reply, offline_responder, scorer_request
from amaris.sim.noisy_judge import read_other_way
from amaris.sim.server import ConfigValue
from amaris.sim.wire import ChatRequest

ERROR_RATE = 0.05
"""Share of criterion verdicts the cheap judge reads the other way from the strong one."""
SURE_WHEN_RIGHT = 0.95
"""Share of its right verdicts it is sure of."""
SURE_WHEN_WRONG = 0.05
"""Share of its wrong verdicts it is sure of all the same."""
SURE_FROM = 0.999
"""The least probability it puts on a verdict it is sure of."""
TOLERANCE = 0.05
"""Two rewards further apart disagree (``scoring.cascade.tolerance``'s default)."""
CASCADE_STORY = (
    "The strong judge is the simulator's (the offline judge's rules), the cheap one reads "
    f"{ERROR_RATE:.0%} of the verdicts the other way and sends logprobs whose margin is a "
    "signal of being right (amaris/sim/cascade.py); the auditor is the strong judge. "
    "cascade.json holds the strong judge's calls over strong-only judging's and the share "
    "of rewards within 0.05 of strong-only's (docs/simulation.md)."
)
"""What the report says of the scenario."""
STRONG = "scorer"
"""The strong judge's ledger agent (the hot path's scorer calls)."""
CHEAP = "cheap_scorer"


def _draw(seed: int, *parts: str) -> float:
    """A uniform draw in [0, 1) from a hash of ``seed`` and ``parts``."""
    digest = hashlib.blake2b(digest_size=8)
    for part in (str(seed), *parts):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(struct.pack(">Q", len(data)))
        digest.update(data)
    return int.from_bytes(digest.digest(), "big") / 2.0**64


def _token(text: str, top: Sequence[tuple[str, float]]) -> TokenLogprob:
    alternatives: list[TopLogprob] = [
        {"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top
    ]
    return {
        "token": text,
        "logprob": top[0][1],
        "bytes": list(text.encode()),
        "top_logprobs": alternatives,
    }


class CheapJudge:
    """The cheap judge (module docstring); other agents' requests answered honestly."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.verdicts = 0
        """Scorer verdicts given so far."""
        self.wrong = 0
        """Of them, read the other way."""
        self._honest = offline_responder(FaultProfile(seed=seed))

    def reading(self, output: str, criterion: str, honest: int) -> tuple[int, int, float]:
        """The score it gives on ``criterion``, the other reading, and its probability."""
        wrong = _draw(self.seed, "wrong", output, criterion) < ERROR_RATE
        sure_share = SURE_WHEN_WRONG if wrong else SURE_WHEN_RIGHT
        sure = _draw(self.seed, "sure", output, criterion) < sure_share
        low, high = (SURE_FROM, 1.0) if sure else (0.5, SURE_FROM)
        p = low + (high - low) * _draw(self.seed, "p", output, criterion)
        other = read_other_way(honest)
        return (other, honest, p) if wrong else (honest, other, p)

    async def __call__(self, body: ChatRequest) -> Reply:
        ask = scorer_request(body)
        if ask is None:
            return await self._honest(body)
        tokens: list[TokenLogprob] = [_token('{"verdicts": [', [('{"verdicts": [', 0.0)])]
        for i, ((text, _), (cid, reason, honest)) in enumerate(
            zip(ask.criteria, ask.honest, strict=True)
        ):
            score, other, p = self.reading(ask.output, text, honest)
            self.verdicts += 1
            self.wrong += score != honest
            head = (
                f'{", " if i else ""}{{"id": {json.dumps(cid)}, '
                f'"reason": {json.dumps(reason or "")}, "score": '
            )
            tokens.append(_token(head, [(head, 0.0)]))
            top = [(str(score), math.log(p))]
            if p < 1.0 and other != score:
                top.append((str(other), math.log(1.0 - p)))
            tokens.append(_token(str(score), top))
            tokens.append(_token("}", [("}", 0.0)]))
        tokens.append(_token("]}", [("]}", 0.0)]))
        content = "".join(t["token"] for t in tokens)
        return Reply(content=content, logprobs=tokens if body.get("logprobs") is True else None)


def cascade_overrides(strong_url: str, cheap_url: str) -> dict[str, ConfigValue]:
    """The server's settings in the scenario: the scorer (and the auditor) on the strong
    judge, the cheap scorer with logprobs on the cheap one, the pipeline offline."""
    offline = {f"client.{agent}.offline": True for agent in AGENTS if agent != "scorer"}
    return {
        "client.scorer.base_url": strong_url,
        "client.scorer.api_key": "simulated",
        "client.auditor.base_url": strong_url,
        "client.auditor.api_key": "simulated",
        "client.cheap_scorer.base_url": cheap_url,
        "client.cheap_scorer.api_key": "simulated",
        "agents.cheap_scorer.logprobs": True,
        **offline,
    }


def strong_only_reward(record: RolloutRecord) -> float | None:
    """The reward the strong judge alone would have given a logged rollout (the offline
    judge on its judged criteria, rule verdicts as logged); None when no judge verdict."""
    verdicts = record.verdicts
    if record.status != "scored" or not any(v.kind == "judge" for v in verdicts):
        return None
    rollout = record.rollout
    reference = rollout.supplemental_context or None
    values = [
        judge_criterion(v.id, v.text, rollout.output, reference).score
        if v.kind == "judge"
        else v.verdict
        for v in verdicts
    ]
    return aggregate([v.weight for v in verdicts], values)


class StepCalls(BaseModel):
    """One step's judged rollouts, strong calls and cheap decisions."""

    step: int
    judged: int
    strong_calls: int
    decided_by_cheap: int


class CascadeOutcome(BaseModel):
    """``cascade.json``."""

    judged: int
    """Rollouts a judge decided (what strong-only judging makes one strong call each for)."""
    strong_calls: int
    """The strong judge's calls on the hot path (escalations, probes, the warm-up)."""
    cheap_calls: int
    strong_call_share: float | None
    """``strong_calls / judged``."""
    agreement_with_strong: float | None
    """Share of the judged rollouts whose reward is within 0.05 of strong-only's."""
    decided_by_cheap: int
    cheap_agreement: float | None
    """The same share among the rollouts the cheap judge decided."""
    audit_calls: int
    """The audit judge's calls (outside the share: the audit runs with or without it)."""
    cheap_verdicts_wrong: float | None
    """Share of the cheap judge's verdicts it read the other way."""
    steps: list[StepCalls]


def _calls(usage: Iterable[dict[Key, Usage]], agent: str) -> int:
    return sum(
        used.calls for ledger in usage for (name, _), used in ledger.items() if name == agent
    )


def cascade_outcome(
    run: RunResult, records: Sequence[RolloutRecord], judge: CheapJudge
) -> CascadeOutcome:
    """The figures of ``cascade.json`` for ``run`` and its rollout log ``records``."""
    decided = {(s.step, r.rollout_id): r.judge for s in run.steps for r in s.rollouts}
    matches: list[bool] = []
    cheap_matches: list[bool] = []
    for record in records:
        strong = strong_only_reward(record)
        who = decided.get((record.step, record.rollout.id))
        if strong is None or record.score is None or who is None:
            continue
        match = abs(record.score - strong) <= TOLERANCE
        matches.append(match)
        if who == "cheap":
            cheap_matches.append(match)
    usage = [s.usage for s in run.steps]
    strong_calls = _calls(usage, STRONG)
    judged = len(matches)
    return CascadeOutcome(
        judged=judged,
        strong_calls=strong_calls,
        cheap_calls=_calls(usage, CHEAP),
        strong_call_share=round(strong_calls / judged, 4) if judged else None,
        agreement_with_strong=round(sum(matches) / judged, 4) if judged else None,
        decided_by_cheap=len(cheap_matches),
        cheap_agreement=(
            round(sum(cheap_matches) / len(cheap_matches), 4) if cheap_matches else None
        ),
        audit_calls=_calls(usage, "auditor"),
        cheap_verdicts_wrong=round(judge.wrong / judge.verdicts, 4) if judge.verdicts else None,
        steps=[
            StepCalls(
                step=s.step,
                judged=sum(r.judge is not None for r in s.rollouts),
                strong_calls=_calls([s.usage], STRONG),
                decided_by_cheap=sum(r.judge == "cheap" for r in s.rollouts),
            )
            for s in run.steps
        ],
    )
