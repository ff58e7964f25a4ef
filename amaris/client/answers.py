"""What waiting for a step answers, as the client returns it: the server's JSON, typed.

The server's answer is its ``WaitResponse`` (:mod:`api.routes.steps`), each scope's
outcome a :class:`~amaris.steps.outcomes.ScopeOutcome` as JSON. Those models live with the
server stack (their fields are the agents' and the canary's models), which the trainer side
does not load: these types spell their JSON, key for key, with the vocabulary of
:mod:`amaris.models` the server uses too (tests/trainers/test_adapter_payloads.py
keeps them in step).
"""

from __future__ import annotations

from typing import Literal, TypedDict

from amaris.models import RubricsMode, UpdateKind, WaitStatus


class CanaryAnswer(TypedDict, total=False):
    """The rubric canary's report on a scope's candidate rubric (its probes left out)."""

    outcome: Literal["passed", "refused", "skipped"]
    reason: str
    judge_calls: int
    budget: int
    current_gap: float | None
    candidate_gap: float | None
    anchors_gap: float | None


class HackingAnswer(TypedDict, total=False):
    """A reward-hacking behaviour the scope's summary found across the step's rollouts."""

    tag: str
    description: str
    count: int
    share: float
    rollout_ids: list[str]


class DroppedAnswer(TypedDict, total=False):
    """An agent's output the step went on without, and why."""

    agent: str
    part: str
    reason: str


class ScopeAnswer(TypedDict, total=False):
    """A scope's outcome in a step's run: ``outcome`` and ``reason`` (None when there is
    none) always; ``canary`` and ``retired_uninformative`` only when set, ``strategy`` only
    when the updater was asked. A run of an older version answers the fields it recorded."""

    outcome: UpdateKind
    reason: str | None
    version: int
    base_version: int
    strategy: Literal["MAINTENANCE", "CORRECTIVE", "ADVANCEMENT"] | None
    canary: CanaryAnswer
    retired_uninformative: list[str]
    rollouts: int
    hacking: list[HackingAnswer]
    dropped: list[DroppedAnswer]


class WaitAnswer(TypedDict):
    """``/rubric_status/wait``'s JSON answer, returned as is."""

    status: WaitStatus
    """What the finished step did to the rubric: ``updated`` when any scope published a
    new version, else ``rejected`` when any scope's update was rejected, else
    ``unchanged``; ``failed`` when its run failed, ``pending`` when not over yet."""
    mode: RubricsMode
    step: int | None
    error: str | None
    step_status: str | None
    """Where the step stands, when ``pending``."""
    scopes: dict[str, ScopeAnswer] | None
    """Per scope, once the step's run has ended."""
