"""What the scorer asks the judge (:func:`judge_messages`) and what it must answer: the
verdicts (:class:`JudgeVerdicts`), the strict JSON schema that asks for them
(:func:`verdicts_schema`) and the check that they cover each criterion once
(:func:`check_ids`)."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, model_validator

from amaris.agents.payloads import CriteriaContext, CriterionData, RolloutData
from amaris.agents.prompts import agent_messages
from amaris.llm.schema import SchemaNode, strict_schema
from amaris.models import storable
from amaris.rubric.model import RubricVersion
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN

MAX_REASON_CHARS = 2_000
"""Longest reason kept of a verdict: a longer one is clipped (not refused), so a judge
cannot fill the rollout log, the cache and responses with one reply."""
_SHOWN_IDS = 5
"""Criterion ids named per kind in an invalid reply's error."""


def _clip_reason(reason: str) -> str:
    clipped = reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS] + "..."
    return storable(clipped)


class Verdict(BaseModel):
    """The judge's verdict on one criterion.

    ``reason`` comes before ``score``: the strict schema lists properties in field order,
    so a constrained decoder makes the judge write its reason first and the score after,
    conditioned on it (a score written first is a guess the reason then justifies).
    """

    id: str
    reason: Annotated[str, AfterValidator(_clip_reason)] = ""
    """Clipped to :data:`MAX_REASON_CHARS`, lone surrogates replaced."""
    score: int = Field(ge=SCALE_MIN, le=SCALE_MAX)


class JudgeVerdicts(BaseModel):
    """The scorer agent's whole answer.

    Read tolerantly where a judge without a schema (``json_object``, ``none``) strays from
    the shape but not from the meaning: a lone verdict object (``{"id", "reason",
    "score"}``) or ``"verdicts"`` holding one verdict object instead of a list of them are
    a list of that one verdict. Every verdict is still typed (an integer score on the
    scale), and :func:`check_ids` still asks for each criterion once.
    """

    verdicts: list[Verdict]

    @model_validator(mode="before")
    @classmethod
    def _one_verdict(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        if "verdicts" not in data and "id" in data and "score" in data:
            return {"verdicts": [data]}
        inner = data.get("verdicts")
        if isinstance(inner, dict) and "id" in inner:
            return {**data, "verdicts": [inner]}
        return data


def check_ids(rubric: RubricVersion) -> Callable[[JudgeVerdicts], None]:
    """The check of a reply's verdicts: each of ``rubric``'s judged criterion ids exactly
    once. A verdict on an id the rubric does not have is ignored (the scorer reads only
    the rubric's ids, :func:`known_verdicts`) when every criterion has its one verdict: a
    judge without a schema (``json_object``) sometimes adds one for a criterion of its own
    (SmolLM2-135M: ``B1``), and the verdicts asked for are all there."""
    expected = [c.id for c in rubric.judged]
    known = frozenset(expected)

    def check(result: JudgeVerdicts) -> None:
        # Sets and a counter: linear in the reply, however many verdicts it holds.
        if len(result.verdicts) == len(expected):
            got = {v.id for v in result.verdicts}
            if got == known:
                return
        counts = Counter(v.id for v in result.verdicts)
        missing = [i for i in expected if i not in counts]
        extra = [i for i in counts if i not in known]
        duplicated = sorted(i for i, n in counts.items() if n > 1)
        if not missing and all(counts[i] == 1 for i in expected):
            return
        raise ValueError(
            f"verdicts must cover each criterion id exactly once ({len(expected)}; the "
            f"reply has {len(result.verdicts)}); missing {_some(missing)}, unknown "
            f"{_some(extra)}, duplicated {_some(duplicated)}"
        )

    return check


def known_verdicts(result: JudgeVerdicts, rubric: RubricVersion) -> list[Verdict]:
    """``result``'s verdicts on ``rubric``'s judged criteria, in the reply's order (those
    on ids it does not have left out; see :func:`check_ids`)."""
    known = {c.id for c in rubric.judged}
    return [v for v in result.verdicts if v.id in known]


EXAMPLE_REASON = "One short sentence on this criterion."
"""The reason of :func:`verdicts_example`'s verdicts."""
EXAMPLE_SCORE = (SCALE_MIN + SCALE_MAX) // 2
"""The score of :func:`verdicts_example`'s verdicts: the scale's middle."""


def verdicts_example(criterion_ids: tuple[str, ...]) -> JudgeVerdicts:
    """One reply of the exact shape asked for, with the rubric's criterion ids in order:
    what a judge with no schema to decode to (``json_object``) is shown."""
    return JudgeVerdicts(
        verdicts=[Verdict(id=i, reason=EXAMPLE_REASON, score=EXAMPLE_SCORE) for i in criterion_ids]
    )


def _some(ids: list[str]) -> str:
    """Up to :data:`_SHOWN_IDS` ids (each clipped), and how many more."""
    shown = [i if len(i) <= 40 else i[:40] + "..." for i in ids[:_SHOWN_IDS]]
    more = f" and {len(ids) - _SHOWN_IDS} more" if len(ids) > _SHOWN_IDS else ""
    return f"{shown}{more}"


def verdicts_schema(criterion_ids: tuple[str, ...]) -> SchemaNode:
    """The scorer's strict JSON schema for one rubric: one verdict per criterion, ids from
    the rubric's, scores on the integer scale."""
    schema = copy.deepcopy(strict_schema(JudgeVerdicts))
    verdicts = schema["properties"]["verdicts"]
    verdicts["minItems"] = verdicts["maxItems"] = len(criterion_ids)
    item = verdicts["items"]["properties"]
    # In place: the properties keep their order (the reason before the score).
    item["id"] = {"type": "string", "enum": list(criterion_ids)}
    item["score"] = {"type": "integer", "enum": list(range(SCALE_MIN, SCALE_MAX + 1))}
    return schema


def judge_messages(
    prompt: str, rubric: RubricVersion, fields: dict[str, str]
) -> list[dict[str, str]]:
    """The scorer's chat messages for one rollout (its judged ``fields``), cache-first.

    Only the judged criteria are listed (rule criteria are amaris's, not the judge's). The
    system message, ``prompt`` and the rubric's criteria, is byte-identical for every
    rollout judged under one rubric version; the user message holds the rollout alone,
    the prompt and reference (shared by a GRPO group) before the response.
    """
    criteria: list[CriterionData] = [
        {"id": c.id, "text": c.text, "kind": "pitfall" if c.weight < 0 else "requirement"}
        for c in rubric.judged
    ]
    rollout: RolloutData = {
        "input": fields["input"],
        "supplemental_context": fields["supplemental_context"],
        "output": fields["output"],
    }
    context: CriteriaContext = {"criteria": criteria}
    return agent_messages("scorer", prompt, context, {"rollout": rollout})
