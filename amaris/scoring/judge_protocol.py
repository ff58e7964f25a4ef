"""What the scorer asks the judge (:func:`judge_messages`) and what it must answer: the
verdicts (:class:`JudgeVerdicts`; of a trajectory, :class:`TrajectoryVerdicts`, each
verdict naming the turns it attributes the criterion to), the strict JSON schema that asks
for them (:func:`verdicts_schema`) and the check that they cover each criterion once
(:func:`check_ids`)."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, model_validator

from amaris.agents.payloads import CriteriaContext, CriterionData, RolloutData
from amaris.agents.prompts import agent_messages, render_template
from amaris.llm.schema import SchemaNode, strict_schema
from amaris.rubric.model import RubricVersion
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.text_fields import storable
from amaris.trajectory import MAX_MESSAGES

MAX_REASON_CHARS = 2_000
"""Longest reason kept of a verdict: a longer one is clipped (not refused), so a judge
cannot fill the rollout log, the cache and responses with one reply."""
_SHOWN_IDS = 5
"""Criterion ids named per kind in an invalid reply's error."""
MAX_ATTRIBUTED_TURNS = 16
"""Most turns one verdict attributes its criterion to: the schema's bound (kept small, as
the reply's worst-case length counts it against ``max_tokens``), and how many of a longer
list are read (from its first ``4 *`` as many items)."""


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


def _turn_list(value: object) -> list[int]:
    """A verdict's ``turns`` read leniently: up to :data:`MAX_ATTRIBUTED_TURNS` distinct
    whole numbers among a list's first items (an integral float counts), anything else
    dropped; not a list, none. Which of them are the rollout's assistant turns is checked
    against the rollout (:func:`amaris.scoring.turn_rewards.turn_rewards`)."""
    if not isinstance(value, list):
        return []
    found: dict[int, None] = {}
    for item in value[: 4 * MAX_ATTRIBUTED_TURNS]:
        if isinstance(item, float) and item.is_integer():
            item = int(item)
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < 2**31:
            found[item] = None
            if len(found) == MAX_ATTRIBUTED_TURNS:
                break
    return list(found)


class TurnVerdict(Verdict):
    """A verdict on a trajectory: also the turns (assistant message indexes) that met the
    criterion, or for a pitfall showed its behaviour."""

    turns: Annotated[list[int], BeforeValidator(_turn_list)] = Field(default_factory=list)


def _lone_verdict(data: object) -> object:
    """A reply read tolerantly (see :class:`JudgeVerdicts`)."""
    if not isinstance(data, dict):
        return data
    if "verdicts" not in data and "id" in data and "score" in data:
        return {"verdicts": [data]}
    inner = data.get("verdicts")
    if isinstance(inner, dict) and "id" in inner:
        return {**data, "verdicts": [inner]}
    return data


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
        return _lone_verdict(data)


class TrajectoryVerdicts(BaseModel):
    """The scorer agent's whole answer on a trajectory: :class:`JudgeVerdicts` whose
    verdicts attribute their criterion to turns (read as tolerantly)."""

    verdicts: list[TurnVerdict]

    @model_validator(mode="before")
    @classmethod
    def _one_verdict(cls, data: object) -> object:
        return _lone_verdict(data)


Reply = JudgeVerdicts | TrajectoryVerdicts
"""The scorer's answer: on a string rollout, or on a trajectory."""


def check_ids(rubric: RubricVersion) -> Callable[[Reply], None]:
    """The check of a reply's verdicts: each of ``rubric``'s judged criterion ids exactly
    once. A verdict on an id the rubric does not have is ignored (the scorer reads only
    the rubric's ids, :func:`known_verdicts`) when every criterion has its one verdict: a
    judge without a schema (``json_object``) sometimes adds one for a criterion of its own
    (SmolLM2-135M: ``B1``), and the verdicts asked for are all there."""
    expected = [c.id for c in rubric.judged]
    known = frozenset(expected)

    def check(result: Reply) -> None:
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


def known_verdicts(result: Reply, rubric: RubricVersion) -> list[Verdict]:
    """``result``'s verdicts on ``rubric``'s judged criteria, in the reply's order (those
    on ids it does not have left out; see :func:`check_ids`)."""
    known = {c.id for c in rubric.judged}
    return [v for v in result.verdicts if v.id in known]


EXAMPLE_REASON = "One short sentence on this criterion."
"""The reason of :func:`verdicts_example`'s verdicts."""
EXAMPLE_SCORE = (SCALE_MIN + SCALE_MAX) // 2
"""The score of :func:`verdicts_example`'s verdicts: the scale's middle."""


def verdicts_example(
    criterion_ids: tuple[str, ...], trajectory: bool = False
) -> JudgeVerdicts | TrajectoryVerdicts:
    """One reply of the exact shape asked for, with the rubric's criterion ids in order:
    what a judge with no schema to decode to (``json_object``) is shown; of a
    ``trajectory``, each verdict with its (empty) ``turns``."""
    if trajectory:
        return TrajectoryVerdicts(
            verdicts=[
                TurnVerdict(id=i, reason=EXAMPLE_REASON, score=EXAMPLE_SCORE) for i in criterion_ids
            ]
        )
    return JudgeVerdicts(
        verdicts=[Verdict(id=i, reason=EXAMPLE_REASON, score=EXAMPLE_SCORE) for i in criterion_ids]
    )


def _some(ids: list[str]) -> str:
    """Up to :data:`_SHOWN_IDS` ids (each clipped), and how many more."""
    shown = [i if len(i) <= 40 else i[:40] + "..." for i in ids[:_SHOWN_IDS]]
    more = f" and {len(ids) - _SHOWN_IDS} more" if len(ids) > _SHOWN_IDS else ""
    return f"{shown}{more}"


def verdicts_schema(criterion_ids: tuple[str, ...], trajectory: bool = False) -> SchemaNode:
    """The scorer's strict JSON schema for one rubric: one verdict per criterion, ids from
    the rubric's, scores on the integer scale; of a ``trajectory``, each verdict's
    ``turns`` after its score (at most :data:`MAX_ATTRIBUTED_TURNS` indexes)."""
    model = TrajectoryVerdicts if trajectory else JudgeVerdicts
    schema = copy.deepcopy(strict_schema(model))
    verdicts = schema["properties"]["verdicts"]
    verdicts["minItems"] = verdicts["maxItems"] = len(criterion_ids)
    item = verdicts["items"]["properties"]
    # In place: the properties keep their order (the reason before the score).
    item["id"] = {"type": "string", "enum": list(criterion_ids)}
    item["score"] = {"type": "integer", "enum": list(range(SCALE_MIN, SCALE_MAX + 1))}
    if trajectory:
        item["turns"] = {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": MAX_MESSAGES - 1},
            "maxItems": MAX_ATTRIBUTED_TURNS,
        }
    return schema


def judged_criteria(rubric: RubricVersion) -> list[CriterionData]:
    """The criteria the judge is shown: the rubric's judged ones (rule criteria are
    amaris's), each with its kind."""
    return [
        {"id": c.id, "text": c.text, "kind": "pitfall" if c.weight < 0 else "requirement"}
        for c in rubric.judged
    ]


def judge_messages(
    prompt: str,
    rubric: RubricVersion,
    fields: dict[str, str],
    turns: Sequence[int] | None = None,
) -> list[dict[str, str]]:
    """The scorer's chat messages for one rollout (its judged ``fields``), cache-first.

    Only the judged criteria are listed (rule criteria are amaris's, not the judge's). The
    system message, the template ``prompt`` rendered for the rollout's kind
    (:func:`~amaris.agents.prompts.render_template`: its trajectory sections only for a
    trajectory) and the rubric's criteria, is byte-identical for every rollout of one kind
    judged under one rubric version; the user message holds the rollout alone, the prompt
    and reference (shared by a GRPO group) before the response. A trajectory's rollout
    also lists its ``turns`` (the assistant messages' indexes), which the prompt asks the
    judge to attribute each criterion to.
    """
    criteria = judged_criteria(rubric)
    rollout: RolloutData = {
        "input": fields["input"],
        "supplemental_context": fields["supplemental_context"],
        "output": fields["output"],
    }
    if turns is not None:
        rollout["turns"] = list(turns)
    context: CriteriaContext = {"criteria": criteria}
    template = render_template(prompt, trajectory=turns is not None)
    return agent_messages("scorer", template, context, {"rollout": rollout})
