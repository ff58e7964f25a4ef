"""A step run's outcome as a test settles it in place of the step flow."""

from __future__ import annotations

import asyncio

from amaris.steps.outcomes import ScopeOutcome, UpdateKind


def scope_outcome(kind: UpdateKind, reason: str | None = None) -> ScopeOutcome:
    """A scope's outcome: ``kind`` (with ``reason``), on rubric version 1, one rollout."""
    return ScopeOutcome(
        outcome=kind, version=1, base_version=1, reason=reason, rollouts=1, hacking=[], dropped=[]
    )


async def settled() -> None:
    """Until every task created before this call has run its first step (asyncio runs ready
    tasks in order): a step run the coordinator started by then has reached its launcher."""
    await asyncio.create_task(asyncio.sleep(0))
