"""The offline judge's answer to the listwise scorer (``scoring.group_mode: listwise``): each
labelled response of the group judged by the same rules as one rollout
(:func:`amaris.offline.heuristics.judge_criteria`), so its reward does not depend on where
it was shown or on what the other responses say."""

from __future__ import annotations

from amaris.agents.payloads import GroupScorerAnswer, GroupScorerData, LabelVerdicts
from amaris.offline.heuristics import judge_criteria


def judge_group(data: GroupScorerData) -> GroupScorerAnswer:
    """Per label, in the order shown, a verdict per criterion."""
    criteria = [(str(c["id"]), str(c["text"])) for c in data["criteria"]]
    prompt = str(data.get("input") or "")
    reference = data.get("supplemental_context") or None
    answers: list[LabelVerdicts] = []
    for entry in data["rollouts"]:
        verdicts = judge_criteria(
            criteria, input=prompt, output=str(entry["output"] or ""), reference=reference
        )
        answers.append(
            {
                "label": str(entry["label"]),
                "verdicts": [{"id": v.id, "reason": v.reason, "score": v.score} for v in verdicts],
            }
        )
    return {"rollouts": answers}
