"""amaris.agents.findings: amaris's ``grader_injection`` finding in the analysis of the rollout
that carried the text, and its true count in every summary, whatever the agents wrote (an
obedient agent drops it, or writes its own count)."""

from __future__ import annotations

from amaris.agents.findings import (
    AGENTS_OWN_TAG,
    GRADER_INJECTION,
    Injection,
    Injections,
    StepFindings,
)
from amaris.agents.schemas import (
    AggregatedBehaviour,
    AggregatedHackingAnalysis,
    BatchSummary,
    ExecutiveSummary,
    IndividualAnalysis,
    MemoryEntry,
)
from tests.support.obedient_llm import NOTE

FOUND = Injection(field="metadata.high_level_goal", snippet=NOTE)


def analysis(rollout_id: str, *tags: str) -> IndividualAnalysis:
    behaviours = [{"tag": t, "description": "d", "evidence": "e"} for t in tags]
    return IndividualAnalysis.model_validate(
        {
            "rollout_id": rollout_id,
            "overall_assessment": {"quality": "good"},
            "performance_at_stage": {"meets_expectations": True},
            "reward_hacking_analysis": {
                "behaviours": behaviours,
                "detected": bool(tags),
                "severity": "low" if tags else "none",
            },
            "rubric_evaluation": {"score_justified": True},
        }
    )


def summary(*behaviours: tuple[str, int, float, list[str]]) -> BatchSummary:
    return BatchSummary(
        executive_summary=ExecutiveSummary(summary="s"),
        aggregated_reward_hacking=AggregatedHackingAnalysis(
            detected=bool(behaviours),
            behaviours=[
                AggregatedBehaviour(tag=t, count=c, share=s, rollout_ids=ids)
                for t, c, s, ids in behaviours
            ],
        ),
        memory_entry=MemoryEntry(text="m"),
    )


def counted(merged: BatchSummary) -> list[tuple[str, int, float, list[str]]]:
    return [
        (b.tag, b.count, b.share, b.rollout_ids)
        for b in merged.aggregated_reward_hacking.behaviours
    ]


def test_the_rollout_that_carried_it_gets_the_finding_first_severity_high() -> None:
    found = Injections()
    found.add({"r2": [FOUND], "r9": []})
    clean, carrier = found.analysed(
        [analysis("r1", "hedging"), analysis("r2", "hedging", GRADER_INJECTION)]
    )
    assert clean == analysis("r1", "hedging")
    hacking = carrier.reward_hacking_analysis
    assert [b.tag for b in hacking.behaviours] == [GRADER_INJECTION, "hedging"]
    assert (hacking.detected, hacking.severity) == (True, "high")
    assert hacking.behaviours[0].evidence == f"metadata.high_level_goal: {NOTE}"
    assert hacking.behaviours[0].description.endswith("in metadata.high_level_goal")
    assert found.by_rollout == {"r2": [FOUND]}


def test_an_analysis_full_of_behaviours_still_gets_it() -> None:
    found = Injections()
    found.add({"r1": [FOUND]})
    [carrier] = found.analysed([analysis("r1", "a", "b", "c", "d", "e")])
    assert [b.tag for b in carrier.reward_hacking_analysis.behaviours] == [
        GRADER_INJECTION,
        *"abcd",
    ]


def test_an_agents_own_use_of_the_tag_is_renamed() -> None:
    [renamed] = Injections().analysed([analysis("r1", GRADER_INJECTION)])
    assert [b.tag for b in renamed.reward_hacking_analysis.behaviours] == [AGENTS_OWN_TAG]


def test_a_summary_counts_the_rollouts_it_covers_that_carried_it() -> None:
    found = Injections()
    found.add({"r2": [FOUND], "r4": [FOUND], "r8": [FOUND]})
    # the agent dropped it
    fixed = found.summarised(summary(("hedging", 1, 0.25, ["r1"])), ["r1", "r2", "r3", "r4"])
    assert counted(fixed) == [
        (GRADER_INJECTION, 2, 0.5, ["r2", "r4"]),
        ("hedging", 1, 0.25, ["r1"]),
    ]
    assert fixed.aggregated_reward_hacking.detected is True
    # the agent wrote its own count: replaced
    written = summary((GRADER_INJECTION, 9, 0.9, ["r1"]))
    assert counted(found.summarised(written, ["r1", "r2"])) == [(GRADER_INJECTION, 1, 0.5, ["r2"])]
    # none carried it: the agent's is removed, and nothing is detected any more
    clean = found.summarised(written, ["r1", "r3"])
    assert counted(clean) == []
    assert clean.aggregated_reward_hacking.detected is False


def test_a_full_list_of_behaviours_makes_room_for_it() -> None:
    found = Injections()
    found.add({f"r{i}": [FOUND] for i in range(12)})
    ten = summary(*((f"tag{i}", 20 - i, 0.1, []) for i in range(10)))
    fixed = counted(found.summarised(ten, [f"r{i}" for i in range(20)]))
    assert len(fixed) == 10
    assert (GRADER_INJECTION, 12, 0.6, [f"r{i}" for i in range(10)]) in fixed
    assert "tag9" not in [tag for tag, *_ in fixed]  # the least frequent gave way


def test_a_summary_of_summaries_counts_over_the_rollouts_they_cover() -> None:
    found = Injections()
    found.add({"r1": [FOUND], "r5": [FOUND]})
    first = found.summarised(summary(), ["r0", "r1", "r2", "r3"])
    second = found.summarised(summary(), ["r4", "r5"])
    third = found.summarised(summary(), ["r6"])
    merged = found.merged(summary((GRADER_INJECTION, 1, 0.1, ["r1"])), [first, second])
    assert counted(merged) == [(GRADER_INJECTION, 2, 2 / 6, ["r1", "r5"])]
    whole = found.merged(summary(), [merged, third])  # a round of merged summaries
    assert counted(whole) == [(GRADER_INJECTION, 2, 2 / 7, ["r1", "r5"])]
    # a summary not seen here: counted over every rollout summarised so far
    stranger = found.merged(summary(), [summary()])
    assert counted(stranger) == [(GRADER_INJECTION, 2, 2 / 7, ["r1", "r5"])]


def test_the_step_findings_name_what_an_update_may_cite() -> None:
    found = Injections()
    found.add({"r1": [FOUND, Injection(field="id", snippet=NOTE)], "r2": [FOUND]})
    step = summary(("hedging", 1, 0.5, ["r3"]), (GRADER_INJECTION, 1, 0.5, ["r1"]))
    assert found.findings(step, alarm=True, uninformative=["R3"]) == StepFindings(
        ids=("hedging", GRADER_INJECTION, "fidelity_alarm", "R3"),
        injected=(GRADER_INJECTION,),
        snippets=(NOTE,),
    )
    # an injection whose analysis was dropped (not in the summary) is still an injection
    assert found.findings(summary(), alarm=False, uninformative=[]).injected == (GRADER_INJECTION,)
    assert Injections().findings(summary(), False, []) == StepFindings()
