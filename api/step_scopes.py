"""How the API answers a step run's outcome per scope (``GET /rubric_status/wait``,
``GET /steps/{step}``): each scope's :class:`~amaris.steps.outcomes.ScopeOutcome`, its
``outcome`` and ``reason`` first."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from amaris.steps.outcomes import AnyScopeOutcome, ScopeOutcomes, UpdateKind


class ScopeUpdatePublic(BaseModel):
    """A scope's outcome in a step's run: what became of its rubric update and why, then
    the rest of what the run recorded for the scope."""

    # The scope's other fields (version, base_version, strategy, canary,
    # retired_uninformative, rollouts, hacking, dropped) follow as its JSON has them.
    model_config = ConfigDict(extra="allow")

    outcome: UpdateKind = Field(
        description="skipped, no_update, rejected, unchanged, published or already_published."
    )
    reason: str | None = Field(default=None, description="Why; null when there is no reason.")

    @classmethod
    def of(cls, outcome: AnyScopeOutcome) -> ScopeUpdatePublic:
        """``outcome`` and ``reason`` (``null`` when there is none), then the rest of the
        scope's JSON."""
        return cls.model_validate(outcome.model_dump(mode="json"))


def _public(scopes: ScopeOutcomes | None) -> dict[str, ScopeUpdatePublic] | None:
    return None if scopes is None else {s: ScopeUpdatePublic.of(o) for s, o in scopes.items()}


PublicScopes = Annotated[
    ScopeOutcomes | None,
    PlainSerializer(_public, return_type=dict[str, ScopeUpdatePublic] | None),
]
"""A run's outcome per scope, typed; answered as a :class:`ScopeUpdatePublic` each."""
