"""Who a judge is and how often it is asked: shared by the per-rollout judge
(:class:`~amaris.scoring.scorer.Scorer`) and the judge of a group in one call
(:class:`~amaris.scoring.group.GroupJudge`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class JudgeCalls:
    """The agent whose endpoint and options the calls use (``auditor`` for the audit
    judge, which asks the scorer's prompt on its own endpoint); the ledger agent they
    count under (None: the agent); ``agents.scorer.samples``, independent calls per
    judgement; ``agents.scorer.logprobs``, verdicts are expected values where logprobs
    come back."""

    agent: str = "scorer"
    account: str | None = None
    samples: int = 1
    logprobs: bool = False

    async def replies(self, call: Callable[[], Awaitable[T]]) -> list[T]:
        """``samples`` independent answers of ``call``: k calls, not one with n=k, so that
        every endpoint takes them, each reply is validated and re-asked on its own, and the
        repeated prompt is a prefix-cache hit. One is awaited as is (a gather would wrap it
        in a task)."""
        if self.samples == 1:
            return [await call()]
        return list(await asyncio.gather(*(call() for _ in range(self.samples))))
