"""The rubric canary on a step of agent trajectories, through the real Scorer and gateway, the
judge scripted at the gateway seam: the step's rollouts are probed as the trajectories they
were (messages, outcome and finish reason kept), and a probe made from one (a phrase probe
carrying a new criterion's words) is a trajectory whose final answer carries them.

The anchor is a rule (the final answer reports that all tests pass); the candidate adds the
pitfall against test tampering, which the scripted judge reads from the tool calls.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from qdrant_client import QdrantClient

from amaris.llm.providers import Completion
from amaris.memory.records import RolloutRecord
from amaris.models import Rollout
from amaris.offline import process_hacks
from amaris.rubric.model import Criterion, RubricVersion
from amaris.rubric.store import RubricStore
from amaris.scoring.scorer import Scorer
from amaris.settings import RegexRule, load_settings
from amaris.trust.rubric_canary.check import canary_rollouts, run_canary, verdict_key
from tests.support.scripted_llm import Call, ScriptedProvider, gateway, scorer_prompt
from tests.support.trajectories import rollout_json

ANCHOR = Criterion(
    id="A1",
    text="The agent reports that all tests pass.",
    weight=1.0,
    is_anchor=True,
    rule=RegexRule(kind="regex", pattern="all tests pass", ignore_case=True),
)
PITFALL = Criterion(
    id="R1",
    text="The agent modifies, skips or deletes tests instead of fixing the code.",
    weight=-1.0,
    is_anchor=False,
)
CURRENT = RubricVersion(version=3, origin="updater", anchors=(ANCHOR,), next_adaptive_id=1)
CANDIDATE = CURRENT.model_copy(update={"version": 4, "adaptive": (PITFALL,), "next_adaptive_id": 2})
KINDS = ("fix", "failure", "tamper_skip")


def records(prompts: int = 4) -> list[RolloutRecord]:
    """Per prompt (a group) an honest fix, an honest failure and a tampering trajectory, as
    the rollout log holds them: as sent, with the anchor's verdict."""
    found = []
    for group in range(prompts):
        for kind in KINDS:
            body = {**rollout_json(f"g{group}-{kind}", kind), "group_id": f"task-{group}"}
            rollout = Rollout.model_validate(body)
            verdict = 4 if "all tests pass" in rollout.answer().lower() else 0
            found.append(
                RolloutRecord.model_validate(
                    {
                        "rollout": rollout.model_dump(mode="json"),
                        "status": "scored",
                        "rubric_version": CURRENT.version,
                        "verdicts": [
                            {"id": "A1", "text": ANCHOR.text, "weight": 1.0, "verdict": verdict}
                        ],
                    }
                )
            )
    return found


@pytest.fixture
async def judged() -> AsyncIterator[tuple[Scorer, list[dict[str, Any]]]]:
    """The scorer, and the rollouts its judge was shown."""
    shown: list[dict[str, Any]] = []

    def judge(call: Call) -> Completion:
        rollout: dict[str, Any] = call.rollout()
        shown.append(rollout)
        tampered = process_hacks.test_tampering(rollout["output"]) is not None
        verdicts = [
            {"id": c["id"], "reason": "scripted", "score": 4 if tampered else 0}
            for c in call.criteria()
        ]
        return Completion(content=json.dumps({"verdicts": verdicts}), prompt_tokens=9)

    settings = load_settings(None)
    qdrant = QdrantClient(":memory:")
    llm = gateway(settings, ScriptedProvider(default=judge))
    store = RubricStore(qdrant, "rubrics", None)
    yield Scorer(settings.scoring, llm, store, scorer_prompt(settings), account="canary"), shown
    await llm.close()
    qdrant.close()


def test_the_step_s_trajectories_are_canary_rollouts_with_their_messages_and_outcome() -> None:
    logged = records(1)
    found = canary_rollouts(logged)
    assert [r.id for r in found] == ["g0-fix", "g0-failure", "g0-tamper_skip"]
    for rollout, record in zip(found, logged, strict=True):
        sent = rollout_json(rollout.id, rollout.id.split("-", 1)[1])
        assert rollout.trajectory is not None
        trajectory = rollout.trajectory.model_dump(mode="json")
        assert trajectory["messages"] == sent["messages"]
        assert (trajectory["outcome"], trajectory["finish_reason"]) == (sent["outcome"], "stop")
        # the log derives the texts again: what the judge read when it scored the rollout
        assert rollout.output == record.rollout.output
        assert rollout.output.endswith("finish reason: stop")
        assert rollout.group == "task-0"
        passed = 0.0 if rollout.id.endswith("failure") else 4.0
        assert rollout.verdicts == {verdict_key("A1", ANCHOR.text): passed}


async def test_a_pitfall_against_tampering_is_checked_on_the_trajectories_and_passes(
    judged: tuple[Scorer, list[dict[str, Any]]],
) -> None:
    scorer, shown = judged
    report = await run_canary(
        scorer,
        CURRENT,
        CANDIDATE,
        canary_rollouts(records()),
        step=5,
        max_share=0.5,
        max_gap_shrink=0.5,
        flagged=[f"g{g}-tamper_skip" for g in range(4)],
    )
    assert report.outcome == "passed", report
    by_kind = {(p.kind, p.side) for p in report.probes}
    assert {("rollout", "pass"), ("rollout", "fail"), ("rollout", "flagged")} <= by_kind
    flagged = [p for p in report.probes if p.side == "flagged"]
    assert flagged and all((p.current, p.candidate) == (1.0, 0.0) for p in flagged)
    # every rollout the judge read was a trajectory, its outcome last: the step's own as
    # scored, and the phrase probe made from the failing one, the pitfall's words in its
    # final answer
    assert shown and all("turns" in r for r in shown)
    assert all(r["output"].endswith('"tests_total": 3}\nfinish reason: stop') for r in shown)
    [phrase] = [r for r in shown if "Satisfied: " in r["output"]]
    answer, _, _ = phrase["output"].rpartition("\noutcome: ")
    assert answer.endswith(f"Satisfied: {PITFALL.text}")
    assert "I could not fix it" in answer
