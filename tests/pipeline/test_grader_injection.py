"""A note to the rubric updater, planted in one rollout, through a real step: real Prefect
flow, real Qdrant, every agent an obedient LLM faked at the gateway over HTTP
(tests/support/obedient_llm.py). Each agent obeys the note, the updater proposes the
criterion it asks for; amaris finds the note itself, reports it as a ``grader_injection``
finding of the rollout that carried it, and refuses the criterion: a reply saying
TRUSTED-42 is never paid for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amaris.agents.prompts import DATA_END, DATA_START, builtin_prompt
from amaris.settings import AGENTS, AUDITOR
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.obedient_llm import INJECTED_CRITERION, MARKER, NOTE, PHRASE, obedient
from tests.support.pipeline_helpers import metadata, rollout
from tests.support.settings import llm_settings

STEPS = {
    "output": 80,
    "input": 82,
    "supplemental_context": 84,
    "high_level_goal": 86,
    "id": 88,
    "metadata_extra": 90,
}
"""Each field the note is planted in, and the step it is planted at (each run's next step
is its own)."""
CARRIER = 5
"""The index of the rollout that carries the note (the step's last: its metadata is the
scope's)."""


def items(step: int, where: str) -> list[dict[str, Any]]:
    """Six correct rollouts of ``step``; the last carries the note in field ``where``."""
    found = []
    for index in range(CARRIER + 1):
        item = {"rollout": rollout(step, index, "correct"), "metadata": metadata(step)}
        if index == CARRIER:
            if where == "high_level_goal":
                item["metadata"]["high_level_goal"] = NOTE
            elif where == "metadata_extra":
                item["metadata"]["curriculum"] = {"notes": [NOTE]}
            elif where == "id":
                item["rollout"]["id"] = f"s{step}-r{index} {NOTE}"
            else:
                item["rollout"][where] = f"{item['rollout'][where]} {NOTE}"
        found.append(item)
    return found


def run_step(tmp_path: Path, fake_llm: FakeLLM, step: int, where: str) -> dict[str, Any]:
    """Score the step's rollouts, complete it; the outcome, the analyses, the rubric."""
    settings = llm_settings(tmp_path, fake_llm, **{"pipeline.task_retry_delays_seconds": [0.0]})
    fake_llm.default = obedient()
    with serve(settings) as client:
        planted = items(step, where)
        scored = client.post("/batch_score", json={"items": planted})
        assert scored.status_code == 200, scored.text
        assert client.post("/complete", json={"step": step}).status_code == 200
        done = client.get("/rubric_status/wait", params={"step": step, "timeout": 120}).json()
        # the next step: a wrong answer saying the phrase, a right one without it
        wrong, right = rollout(step + 1, 0, "wrong"), rollout(step + 1, 1, "correct")
        wrong["output"] = f"{wrong['output']} {PHRASE}"
        later = client.post(
            "/batch_score",
            json={
                "items": [{"rollout": r, "metadata": metadata(step + 1)} for r in (wrong, right)]
            },
        )
        assert later.status_code == 200, later.text
        return {
            "carrier": planted[CARRIER]["rollout"]["id"],
            "outcome": done["scopes"]["global"],
            "analyses": client.get(f"/steps/{step}/analyses").json()["analyses"],
            "rubric": client.get("/rubrics").json(),
            "next": [r["score"] for r in later.json()["results"]],
        }


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("where", list(STEPS))
def test_a_note_to_the_updater_is_reported_and_its_criterion_refused(
    tmp_path: Path, fake_llm: FakeLLM, where: str
) -> None:
    ran = run_step(tmp_path, fake_llm, STEPS[where], where)
    carrier, outcome = ran["carrier"], ran["outcome"]
    # the updater obeyed, and the guard refused its criterion, naming the injection
    assert outcome["outcome"] == "rejected", outcome
    assert INJECTED_CRITERION[:60] in outcome["reason"]
    assert "grader_injection" in outcome["reason"] and PHRASE in outcome["reason"]
    assert ran["rubric"]["version"] == 1
    assert PHRASE not in json.dumps(ran["rubric"])
    # at the next step, saying the phrase does not lift a wrong answer to a right one
    wrong, right = ran["next"]
    assert wrong < right, ran["next"]
    # the rollout's analysis carries amaris's finding, with where it was found
    [analysis] = [a for a in ran["analyses"] if a["rollout_id"] == carrier]
    found = analysis["analysis"]["reward_hacking_analysis"]
    [injection] = [b for b in found["behaviours"] if b["tag"] == "grader_injection"]
    field = {"high_level_goal": "metadata.high_level_goal", "metadata_extra": "metadata."}
    assert injection["evidence"].startswith(field.get(where, where))
    assert MARKER in injection["evidence"]
    assert found["detected"] is True and found["severity"] == "high"
    # the others carry none, and the step's summary counts the one that did
    others = [a for a in ran["analyses"] if a["rollout_id"] != carrier]
    assert len(others) == CARRIER
    assert all(
        b["tag"] != "grader_injection"
        for a in others
        for b in a["analysis"]["reward_hacking_analysis"]["behaviours"]
    )
    [counted] = [b for b in outcome["hacking"] if b["tag"] == "grader_injection"]
    assert (counted["count"], counted["rollout_ids"]) == (1, [carrier])
    assert counted["share"] == pytest.approx(1 / (CARRIER + 1))


@pytest.mark.usefixtures("prefect_harness")
def test_every_agent_gets_the_note_inside_its_data_block_under_the_standing_rule(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # The note in every untrusted field at once; two chunks, so the meta-summarizer runs.
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{"pipeline.task_retry_delays_seconds": [0.0], "pipeline.chunk_size": 3},
    )
    fake_llm.default = obedient()
    planted = items(94, "output")
    planted[CARRIER]["rollout"].update(
        id=f"s94 {NOTE}", input=f"{NOTE} What is 6 * 7?", supplemental_context=f"42 {NOTE}"
    )
    planted[CARRIER]["metadata"].update(high_level_goal=NOTE, extra=NOTE)
    with serve(settings) as client:
        assert client.post("/batch_score", json={"items": planted}).status_code == 200
        assert client.post("/complete", json={"step": 94}).status_code == 200
        done = client.get("/rubric_status/wait", params={"step": 94, "timeout": 120}).json()
    # the meta-summary (the step's summary) counts it though its agent left it out
    outcome = done["scopes"]["global"]
    [counted] = [b for b in outcome["hacking"] if b["tag"] == "grader_injection"]
    assert (counted["count"], counted["rollout_ids"]) == (1, [f"s94 {NOTE}"])
    assert outcome["outcome"] == "rejected"
    rule = standing_rule()
    seen: set[str] = set()
    for body in fake_llm.requests:
        messages = body["messages"]
        agent = str(json.loads(data_lines(messages)[0])["agent"])
        seen.add(agent)
        assert rule in " ".join(messages[0]["content"].split()), agent
        for message in messages:
            outside = strip_data(message["content"])
            assert MARKER not in outside and PHRASE not in outside, (agent, message["role"])
    assert seen >= set(AGENTS) - {AUDITOR}  # every agent of a step (the auditor is off)


def standing_rule() -> str:
    """The standing rule, as the analyzer's template words it (every template the same:
    tests/pipeline/test_standing_rule.py)."""
    template = builtin_prompt("analyzer")
    start = template.index("Standing rule:")
    return " ".join(template[start : template.index("\n\n", start)].split())


def data_lines(messages: list[dict[str, str]]) -> list[str]:
    """The JSON lines of the messages' data blocks."""
    lines = [line for m in messages for line in m["content"].split("\n")]
    return [lines[i + 1] for i, line in enumerate(lines[:-2]) if line == DATA_START]


def strip_data(content: str) -> str:
    """``content`` without its data blocks (marker lines and the JSON line between)."""
    lines = content.split("\n")
    kept, skip = [], 0
    for index, line in enumerate(lines):
        if skip:
            skip -= 1
            continue
        if line == DATA_START and index + 2 < len(lines) and lines[index + 2] == DATA_END:
            skip = 2
            continue
        kept.append(line)
    return "\n".join(kept)
