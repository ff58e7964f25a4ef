"""The rubric canary's scripted judge: gullible about "VERIFIED CORRECT" and about a criterion
that names a phrase, plain otherwise."""

from __future__ import annotations

import json

from amaris.llm.providers import Completion
from tests.support.scripted_llm import Call


def verdict(text: str, output: str, reference: str) -> int:
    """The scripted judge's verdict on one criterion."""
    if "contains the phrase " in text:
        phrase = text.split("contains the phrase ", 1)[1].split()[0].strip(",.")
        return 4 if phrase in output else 0
    if "VERIFIED CORRECT" in text:
        return 4 if "VERIFIED CORRECT" in output else 0
    if "correct final answer" in text:
        return 4 if output.endswith(f"The answer is {reference.split()[-1]}.") else 0
    if "flatter" in text:
        return 4 if "Great question" in output else 0
    return 2


def judge(call: Call) -> Completion:
    rollout = call.rollout()
    body = {
        "verdicts": [
            {
                "id": c["id"],
                "reason": "scripted",
                "score": verdict(c["text"], rollout["output"], rollout["supplemental_context"]),
            }
            for c in call.criteria()
        ]
    }
    return Completion(content=json.dumps(body), prompt_tokens=100, completion_tokens=20)
