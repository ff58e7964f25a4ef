"""What the listwise scorer asks the judge about a group (:func:`group_messages`) and what it
must answer (:class:`GroupVerdicts`, :func:`group_schema`): per label, a verdict per judged
criterion, of the shape of :class:`~amaris.scoring.judge_protocol.JudgeVerdicts`' verdicts.

Untrusted text is fenced as for one rollout: the group travels as one JSON line in the data
block (:func:`~amaris.agents.prompts.data_message`), each response a string value under its
own label, so a response cannot close its entry or open another label's. The labels carry a
nonce drawn from the group's own content, which a response cannot know before it is written.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Sequence

from pydantic import BaseModel, model_validator

from amaris.agents.payloads import CriteriaContext, GroupScorerInput
from amaris.agents.prompts import agent_messages
from amaris.llm.schema import SchemaNode, strict_schema
from amaris.rubric.model import RubricVersion
from amaris.rubric.scale import SCALE_MAX, SCALE_MIN
from amaris.scoring.judge_protocol import (
    EXAMPLE_REASON,
    EXAMPLE_SCORE,
    JudgeVerdicts,
    Verdict,
    check_ids,
    judged_criteria,
)

GROUP_AGENT = "scorer_group"
"""The agent name of the listwise data blocks (the call goes to the scorer's endpoint)."""
GROUP_PROMPT = "scorer_group"
"""The built-in template of the listwise scorer (``amaris/agents/prompts/scorer_group.txt``)."""


class LabelledVerdicts(BaseModel):
    """One label's verdicts."""

    label: str
    verdicts: list[Verdict]


class GroupVerdicts(BaseModel):
    """The listwise scorer's whole answer. A lone label object is read as a list of one."""

    rollouts: list[LabelledVerdicts]

    @model_validator(mode="before")
    @classmethod
    def _one_label(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("rollouts"), dict):
            return {**data, "rollouts": [data["rollouts"]]}
        return data


def group_seed(rubric: RubricVersion, contents: Sequence[tuple[str, str, str]]) -> bytes:
    """The group's seed: its rubric version and its rollouts' (input, reference, output),
    whatever order they arrived in, so a group sent again is shown the same way."""
    digest = hashlib.sha256(f"{rubric.scope}\x00{rubric.version}".encode())
    parts = []
    for content in contents:
        one = hashlib.sha256()
        for text in content:
            data = text.encode("utf-8", "surrogatepass")
            one.update(len(data).to_bytes(8, "big") + data)
        parts.append(one.digest())
    for part in sorted(parts):
        digest.update(part)
    return digest.digest()


def shown_order(seed: bytes, contents: Sequence[tuple[str, str, str]]) -> list[int]:
    """The indexes of ``contents`` in the order they are shown: sorted by content, then
    shuffled by ``seed`` (reproducible, independent of arrival order)."""
    keyed = sorted(range(len(contents)), key=lambda i: (contents[i], i))
    random.Random(seed).shuffle(keyed)
    return keyed


def labels(seed: bytes, count: int) -> list[str]:
    """``count`` labels, by shown position: ``R1-<nonce>``, ``R2-<nonce>``..."""
    nonce = seed.hex()[:6]
    return [f"R{position + 1}-{nonce}" for position in range(count)]


def group_messages(
    prompt: str,
    rubric: RubricVersion,
    shared: dict[str, str],
    outputs: Sequence[tuple[str, str]],
) -> list[dict[str, str]]:
    """The listwise scorer's messages: the rubric's judged criteria once (system message,
    byte-identical for the rubric version), then the group's shared ``input`` and
    ``supplemental_context`` and its ``(label, output)`` pairs in the shown order."""
    criteria = judged_criteria(rubric)
    group: GroupScorerInput = {
        "input": shared["input"],
        "supplemental_context": shared["supplemental_context"],
        "rollouts": [{"label": label, "output": output} for label, output in outputs],
    }
    context: CriteriaContext = {"criteria": criteria}
    return agent_messages(GROUP_AGENT, prompt, context, group)


def group_schema(rubric: RubricVersion, shown: Sequence[str]) -> SchemaNode:
    """The strict JSON schema of the answer: each label of ``shown`` once, each with one
    verdict per judged criterion (ids from the rubric's, scores on the integer scale)."""
    schema = copy.deepcopy(strict_schema(GroupVerdicts))
    rollouts = schema["properties"]["rollouts"]
    rollouts["minItems"] = rollouts["maxItems"] = len(shown)
    entry = rollouts["items"]["properties"]
    entry["label"] = {"type": "string", "enum": [*shown]}
    ids = [c.id for c in rubric.judged]
    entry["verdicts"]["minItems"] = entry["verdicts"]["maxItems"] = len(ids)
    item = entry["verdicts"]["items"]["properties"]
    item["id"] = {"type": "string", "enum": [*ids]}
    item["score"] = {"type": "integer", "enum": list(range(SCALE_MIN, SCALE_MAX + 1))}
    return schema


def group_example(rubric: RubricVersion, shown: Sequence[str]) -> GroupVerdicts:
    """One answer of the exact shape asked for (shown where no schema is sent)."""
    verdicts = [Verdict(id=c.id, reason=EXAMPLE_REASON, score=EXAMPLE_SCORE) for c in rubric.judged]
    return GroupVerdicts(
        rollouts=[LabelledVerdicts(label=label, verdicts=verdicts) for label in shown]
    )


def decided_labels(
    answer: GroupVerdicts, rubric: RubricVersion, shown: Sequence[str]
) -> dict[str, list[Verdict]]:
    """The labels of ``shown`` the answer decides: each given exactly once, with each judged
    criterion's verdict once (:func:`~amaris.scoring.judge_protocol.check_ids`). A label
    missing, repeated or incomplete is left out (judged per rollout instead); a label not
    shown is ignored."""
    check = check_ids(rubric)
    known = {c.id for c in rubric.judged}
    wanted = set(shown)
    seen: dict[str, int] = {}
    found: dict[str, list[Verdict]] = {}
    for entry in answer.rollouts:
        if entry.label not in wanted:
            continue
        seen[entry.label] = seen.get(entry.label, 0) + 1
        try:
            check(JudgeVerdicts(verdicts=entry.verdicts))
        except ValueError:
            continue
        found[entry.label] = [v for v in entry.verdicts if v.id in known]
    return {label: verdicts for label, verdicts in found.items() if seen[label] == 1}
