"""A simulated training step for the offline agent tests, called as the gateway would call."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from amaris.agents import BatchSummary, IndividualAnalysis, RubricUpdateProposal
from amaris.agents.prompts import data_message
from amaris.offline import tags
from amaris.offline.judge import respond
from amaris.rubric.aggregate import aggregate

STEP = 4
METADATA = {"high_level_goal": "math", "model_size": "7B", "current_step": STEP, "total_steps": 10}
PROMPT = "What is 6 x 7?"
REFERENCE = "42"
ANCHOR = {
    "id": "A1",
    "text": "The response gives the correct final answer.",
    "weight": 1.0,
    "kind": "requirement",
    "is_anchor": True,
}
SEVERAL = tags.BY_TAG["multiple_candidate_answers"]
BOUNDS = {"max_adaptive": 5, "min_weight": -2.0, "max_weight": 2.0, "max_modifications": 3}
OUTPUTS = {
    "r0": "The answer is 42 or 24.",
    "r1": "6 x 7 = 42. The answer is 42.",
    "r2": "Six sevens make 42, so the answer is 42.",
    "r3": "Either 41, 42 or 43.",
    "r4": "The answer is 48.",
    "r5": "6 x 7 = 42. The answer is 42.",
    "r6": "Possible answers: 42, 44.",
    "r7": "The answer is 36.",
    "r8": "The answer is 42 or 43.",
    "r9": "7 x 6 = 42, so the answer is 42.",
}
HACKED = ["r0", "r3", "r6", "r8"]
"""The rollouts offering several candidate answers, the right one among them."""
WRONG = ["r4", "r7"]


def call(agent: str, payload: dict[str, Any]) -> Any:
    """Returns the offline judge's parsed JSON reply to one agent request."""
    messages = [
        {"role": "system", "content": "instructions"},
        {"role": "user", "content": data_message(agent, payload)},
    ]
    return json.loads(respond(messages))


def criterion(cid: str, text: str, weight: float) -> dict[str, Any]:
    """Returns one criterion as the pipeline payloads carry it."""
    kind = "pitfall" if weight < 0 else "requirement"
    return {"id": cid, "text": text, "weight": weight, "kind": kind, "is_anchor": False}


def score(output: str, criteria: list[dict[str, Any]]) -> float:
    """Returns the offline reward of a response under the criteria."""
    rollout = {"input": PROMPT, "output": output, "supplemental_context": REFERENCE}
    reply = call("scorer", {"criteria": criteria, "rollout": rollout})
    return aggregate([c["weight"] for c in criteria], [v["score"] for v in reply["verdicts"]])


def analyse(rid: str, criteria: list[dict[str, Any]]) -> dict[str, Any]:
    """Returns the validated analysis of one rollout of the step, with its score added."""
    scores = {other: score(output, criteria) for other, output in OUTPUTS.items()}
    payload = {
        "rollout": {
            "id": rid,
            "input": PROMPT,
            "output": OUTPUTS[rid],
            "supplemental_context": REFERENCE,
        },
        "metadata": METADATA,
        "score": scores[rid],
        "verdicts": [],
        "criteria": criteria,
        "group": [
            {"id": other, "output": out, "score": scores[other]}
            for other, out in OUTPUTS.items()
            if other != rid
        ],
    }
    result = IndividualAnalysis.model_validate(call("analyzer", payload))
    return {**result.model_dump(mode="json"), "score": scores[rid]}


def summarise(analyses: list[dict[str, Any]], criteria: list[dict[str, Any]]) -> dict[str, Any]:
    """Returns the validated summary of analyses."""
    scores = [a["score"] for a in analyses]
    stats = {
        "count": len(scores),
        "mean": sum(scores) / len(scores),
        "min": min(scores),
        "max": max(scores),
    }
    payload = {
        "step": STEP,
        "metadata": METADATA,
        "criteria": criteria,
        "score_stats": stats,
        "analyses": analyses,
    }
    return BatchSummary.model_validate(call("summarizer", payload)).model_dump(mode="json")


def update(
    summary: dict[str, Any], criteria: list[dict[str, Any]], **extra: Any
) -> RubricUpdateProposal:
    """Returns the validated update proposal for a summary."""
    payload = {
        "step": STEP,
        "metadata": METADATA,
        "criteria": criteria,
        "summary": summary,
        "static_memory": [],
        "dynamic_memory": [],
        "bounds": BOUNDS,
        **extra,
    }
    return RubricUpdateProposal.model_validate(call("updater", payload))


GAP = "No criterion penalises offering several candidate answers instead of committing to one"


@cache
def step_analyses() -> list[dict[str, Any]]:
    """The step's analyses under the anchor alone (computed once; do not mutate)."""
    return [analyse(rid, [ANCHOR]) for rid in OUTPUTS]


@cache
def step_summary() -> dict[str, Any]:
    """The step's summary under the anchor alone (computed once; do not mutate)."""
    return summarise(step_analyses(), [ANCHOR])
