"""The offline updater acts on a fidelity alarm's evidence (amaris.offline.fidelity): a
pitfall worded afresh for the behaviour the disagreeing rollouts share."""

from __future__ import annotations

from typing import Any

from amaris.offline import tags
from amaris.offline.fidelity import shared_tag, sharpened_pitfall
from amaris.offline.updater import handle_updater
from amaris.trust.audit.models import AlarmEvidence, DisagreeingRollout

PADDED = "2 + 2. " + "Self-assessment: fully met, checked twice. " * 60 + "The answer is 4."
SHORT = "2 + 2 = 4. The answer is 4."
PADDING_PITFALL = {
    "id": "R1",
    "text": tags.BY_TAG["verbosity_padding"].pitfall,
    "weight": -1.0,
    "kind": "pitfall",
}
CRITERIA = [
    {"id": "A1", "text": "The final answer is correct.", "weight": 1.0, "is_anchor": True},
    PADDING_PITFALL,
]


def _alarm(outputs: list[str], clip: int | None = None) -> dict[str, Any]:
    return AlarmEvidence(
        step=6,
        reason="top tail",
        rollouts=[
            DisagreeingRollout(
                rollout_id=f"r{i}",
                input="2 + 2?",
                output=o[:clip],
                output_words=len(o.split()),
                training_reward=1.0,
                audit_reward=0.0,
            )
            for i, o in enumerate(outputs)
        ],
    ).model_dump(mode="json")


def _data(criteria: list[dict[str, Any]], alarm: dict[str, Any] | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "step": 6,
        "criteria": criteria,
        "bounds": {"max_adaptive": 5, "min_weight": -2, "max_weight": 2, "max_modifications": 3},
        # the analyzer saw padding, but a pitfall already penalises it: no canonical add
        "summary": {
            "aggregated_reward_hacking": {
                "behaviours": [{"tag": "verbosity_padding", "count": 4, "share": 0.4}]
            }
        },
    }
    if alarm is not None:
        data["fidelity_alarm"] = alarm
    return data


def test_the_shared_behaviour_is_the_one_most_evidence_rollouts_show() -> None:
    assert shared_tag(_alarm([PADDED, PADDED, SHORT])) == "verbosity_padding"
    assert shared_tag(_alarm([PADDED, SHORT, SHORT])) is None  # a third: not shared
    assert shared_tag(_alarm([])) is None
    # the evidence's replies are clipped: the padding shows in their length alone
    assert shared_tag(_alarm([PADDED, PADDED, SHORT], clip=600)) == "verbosity_padding"


def test_an_alarm_rewords_the_pitfall_the_judge_no_longer_reads_once() -> None:
    without = handle_updater(_data(CRITERIA, None)).model_dump(mode="json")
    assert without["rubric_modifications"] == []  # already penalised by R1: nothing to do
    proposal = handle_updater(_data(CRITERIA, _alarm([PADDED, PADDED, SHORT]))).model_dump(
        mode="json"
    )
    # R1 is the pitfall the training judge pays anyway: it is edited to a fresh wording
    # (same id and meaning), not copied (an added near-duplicate the guardrails refuse)
    [edited] = proposal["rubric_modifications"]
    assert edited["action"] == "edit" and edited["criterion_id"] == "R1"
    assert edited["findings"] == ["fidelity_alarm"]  # what the reworded pitfall rests on
    assert edited["text"] == sharpened_pitfall("verbosity_padding")
    assert tags.targets(edited["text"], "verbosity_padding")  # the offline scorer reads it
    assert "fidelity alarm at step 6" in edited["reason"]
    assert proposal["update_strategy"] == "CORRECTIVE"
    assert "reworded R1" in proposal["memory_artifact"]["text"]
    # once it is in the rubric, the next alarm rewords it no more, and says why
    sharpened = {**PADDING_PITFALL, "text": edited["text"]}
    again = handle_updater(_data([CRITERIA[0], sharpened], _alarm([PADDED, PADDED]))).model_dump(
        mode="json"
    )
    assert again["rubric_modifications"] == []
    assert any(
        "already penalised by a sharpened pitfall" in e for e in again["rationale"]["evidence"]
    )
    # no room: none, and said so
    full = _data(CRITERIA, _alarm([PADDED]))
    full["bounds"]["max_modifications"] = 0
    assert handle_updater(full).model_dump(mode="json")["rubric_modifications"] == []


def test_an_alarm_adds_a_sharpened_pitfall_when_none_penalises_the_behaviour() -> None:
    data = _data([CRITERIA[0]], _alarm([PADDED, PADDED]))
    data["summary"]["aggregated_reward_hacking"]["behaviours"] = []
    [added] = handle_updater(data).model_dump(mode="json")["rubric_modifications"]
    assert added["action"] == "add" and added["weight"] == -1.0
    assert added["findings"] == ["fidelity_alarm"]
    assert added["text"] == sharpened_pitfall("verbosity_padding")
    assert "no pitfall penalises it" in added["reason"]
