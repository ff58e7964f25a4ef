"""What waiting for a step answers, as the client returns it: the server's own answer
models (:mod:`amaris.step_answer`, the response model of ``GET /rubric_status/wait``),
under the client's names.

Read them by attribute (``answer.status``, ``answer.scopes["global"].outcome``).
Reading them by key, as the JSON they are (``answer["status"]``), works and warns
:class:`DeprecationWarning`; ``answer.model_dump(mode="json")`` is the JSON.
"""

from __future__ import annotations

from amaris.step_answer import AnyScopeOutcome, CanarySummary, Dropped, HackingBehaviour
from amaris.step_answer import WaitAnswer as WaitAnswer

CanaryAnswer = CanarySummary
"""The rubric canary's verdict on a scope's candidate rubric (its probes left out)."""
HackingAnswer = HackingBehaviour
"""A reward-hacking behaviour the scope's summary found across the step's rollouts."""
DroppedAnswer = Dropped
"""An agent's output the step went on without, and why."""
ScopeAnswer = AnyScopeOutcome
"""A scope's outcome in a step's run: a :class:`~amaris.step_answer.ScopeOutcome`, or, for
a run an older version recorded, an :class:`~amaris.step_answer.OlderScopeOutcome` (its
``outcome`` and ``reason``, the other fields it recorded as they are)."""
