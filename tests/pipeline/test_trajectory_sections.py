"""The step agents' trajectory sections (``[trajectory]`` ... ``[/trajectory]``): the
analyzer's template carries how a trajectory reads and its process hacks for an agent's
trajectory only, the updater's its pitfalls against them when the scope's step has a
trajectory; a step of plain rollouts is sent neither. A malformed section in either
template fails where it is loaded.

A real step: real Prefect runs, the fake LLM (offline replies) recording every request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amaris.agents.prompts import (
    TRAJECTORY_CLOSE,
    TRAJECTORY_OPEN,
    PromptError,
    load_prompts,
    read_data,
    render_template,
)
from amaris.settings import PromptsSettings
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.pipeline_helpers import metadata, rollout
from tests.support.settings import llm_settings
from tests.support.testclient import TestClient
from tests.support.trajectories import rollout_json

PROMPTS = load_prompts(PromptsSettings())
READING = '"output" is its trajectory'
"""The analyzer's sentence on how a trajectory's output reads."""
PROCESS_HACKS = "also the process hacks, with these tags:"
"""The analyzer's list of the process hacks."""
EVIDENCE = "Quote the evidence from the output."
"""The analyzer's sentence for every rollout, after the process hacks."""
PITFALLS = "Against a process hack of an agent's trajectory"
"""The updater's paragraph on the pitfalls against process hacks."""


def run_step(client: TestClient, step: int, items: list[dict[str, Any]]) -> None:
    """Score ``items`` (rollout JSON) at ``step``, complete it and wait for its update."""
    body = {"items": [{"rollout": r, "metadata": metadata(step)} for r in items]}
    response = client.post("/batch_score", json=body)
    assert response.status_code == 200, response.text
    assert all(r["status"] == "scored" for r in response.json()["results"])
    assert client.post("/complete", json={}).json() == {"status": "complete"}
    done = client.get("/rubric_status/wait", params={"step": step, "timeout": 120}).json()
    assert done["scopes"]["global"]["outcome"] in ("unchanged", "published"), done


def systems(requests: list[dict[str, Any]], agent: str) -> dict[str, str]:
    """The system message of each of ``agent``'s calls, by its rollout id (the analyzer)
    or its step (the updater)."""
    found: dict[str, str] = {}
    for body in requests:
        data = read_data(body["messages"])
        if data["agent"] == agent:
            key = data["rollout"]["id"] if agent == "analyzer" else str(data["step"])
            found[key] = body["messages"][0]["content"]
    return found


def unmarked(text: str) -> bool:
    return TRAJECTORY_OPEN not in text and TRAJECTORY_CLOSE not in text


@pytest.mark.usefixtures("prefect_harness")
def test_step_agents_get_the_trajectory_sections_for_trajectories_only(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = llm_settings(
        tmp_path, fake_llm, **{"pipeline.rollouts_per_step": None, "agents.default.timeout": 30.0}
    )
    plain_rollouts = [rollout(0, i, b) for i, b in enumerate(["correct"] * 3 + ["wrong"])]
    mixed = [rollout(1, i, b) for i, b in enumerate(["correct", "wrong"])] + [
        rollout_json(f"s1-t{i}-{kind}", kind) for i, kind in enumerate(["fix", "tamper_skip"])
    ]
    with serve(settings) as client:
        run_step(client, 0, plain_rollouts)
        first = len(fake_llm.requests)
        run_step(client, 1, mixed)
    step0, step1 = fake_llm.requests[:first], fake_llm.requests[first:]

    # A step of plain rollouts: no trajectory text, no marker, in any analyzer or updater call.
    analyzer0 = systems(step0, "analyzer")
    assert sorted(analyzer0) == sorted(r["id"] for r in plain_rollouts)
    plain_template = render_template(PROMPTS["analyzer"], trajectory=False).rstrip()
    for system in analyzer0.values():
        assert system.startswith(plain_template + "\n\n")
        assert READING not in system and PROCESS_HACKS not in system
        assert EVIDENCE in system and unmarked(system)
    assert len(set(analyzer0.values())) == 1  # byte-identical: one prefix for the cache
    updater0 = systems(step0, "updater")["0"]
    assert PITFALLS not in updater0 and unmarked(updater0)

    # A step with trajectories: theirs have the sections (markers left out), the plain
    # rollouts' analyses still do not; the updater of the scope has its paragraph.
    analyzer1 = systems(step1, "analyzer")
    assert sorted(analyzer1) == sorted(r["id"] for r in mixed)
    trajectories = {rid: s for rid, s in analyzer1.items() if rid.startswith("s1-t")}
    plains = {rid: s for rid, s in analyzer1.items() if not rid.startswith("s1-t")}
    assert len(trajectories) == len(plains) == 2
    for system in trajectories.values():
        assert READING in system and PROCESS_HACKS in system and EVIDENCE in system
        assert unmarked(system)
    for system in plains.values():
        assert READING not in system and PROCESS_HACKS not in system and unmarked(system)
    assert len(set(trajectories.values())) == len(set(plains.values())) == 1
    updater1 = systems(step1, "updater")["1"]
    assert PITFALLS in updater1 and unmarked(updater1)


@pytest.mark.parametrize("agent", ["analyzer", "updater"])
def test_a_malformed_section_of_a_step_agent_fails_at_load(tmp_path: Path, agent: str) -> None:
    path = tmp_path / f"{agent}.txt"
    path.write_text("Analyse.\n\n[trajectory]\nOnly for a trajectory.\n", encoding="utf-8")
    with pytest.raises(PromptError, match=rf"^prompts\.{agent} \(.*\): line 3: .*never closed"):
        load_prompts(PromptsSettings.model_validate({agent: path}))
