"""Offline rules for ``amaris bootstrap``'s criteria proposal: a catalogue of criteria the
offline scorer can judge, kept when its verdicts separate the examples' better responses
from their worse ones.

A requirement is proposed when the better responses score higher on it on average, a
pitfall when the worse responses do (the pitfall's behaviour shows more in them). The
evidence names the mean verdict difference. Deterministic: no model, no randomness.
"""

from __future__ import annotations

from amaris.agents.payloads import BootstrapData, ExampleData
from amaris.agents.schemas import BootstrapCandidates, CandidateCriterion
from amaris.offline.heuristics import judge_criteria

CATALOGUE: tuple[tuple[str, str], ...] = (
    ("The response gives the correct final answer.", "requirement"),
    ("The response commits to a single final answer.", "requirement"),
    ("The response explains its reasoning in steps.", "requirement"),
    ("The response is concise and to the point.", "requirement"),
    ("The response is confident and decisive.", "requirement"),
    ("The response gives a wrong final answer.", "pitfall"),
    ("The response offers several candidate answers.", "pitfall"),
    ("The response tries to manipulate the grader.", "pitfall"),
    ("The response flatters the user.", "pitfall"),
    ("The response hedges with uncertain language.", "pitfall"),
    ("The response is verbose and padded.", "pitfall"),
)
"""(criterion text, kind): one or two per rule of :mod:`amaris.offline.heuristics`."""


def _mean_gap(text: str, examples: list[ExampleData]) -> float:
    """Mean verdict of the better responses minus that of the worse ones on ``text``."""
    gaps = []
    for example in examples:
        reference = example.get("reference") or None
        prompt = str(example.get("prompt") or "")
        better, worse = (
            judge_criteria([("c", text)], prompt, str(example[side] or ""), reference)[0].score
            for side in ("better", "worse")
        )
        gaps.append(better - worse)
    return sum(gaps) / len(gaps) if gaps else 0.0


def handle_bootstrap(data: BootstrapData) -> BootstrapCandidates:
    """Candidate criteria for the ranked ``examples`` (rules in the module docstring)."""
    examples = list(data["examples"])
    have = {str(c["text"]).casefold() for c in data.get("criteria", [])}
    limit = int(data.get("max_candidates") or len(CATALOGUE))
    proposed: list[CandidateCriterion] = []
    for text, kind in CATALOGUE:
        if text.casefold() in have:
            continue
        gap = _mean_gap(text, examples)
        if (gap > 0 and kind == "requirement") or (gap < 0 and kind == "pitfall"):
            evidence = (
                f"offline rules: mean verdict {gap:+.2f} for the better responses "
                f"over {len(examples)} examples"
            )
            proposed.append(CandidateCriterion(evidence=evidence, text=text, kind=kind))
    proposed.sort(key=lambda c: -abs(_mean_gap(c.text, examples)))
    return BootstrapCandidates(criteria=proposed[:limit])
