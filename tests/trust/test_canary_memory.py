"""The rubric canary re-scores the hacks memory holds: real Prefect
flows, real Qdrant (:memory:), the real Scorer and gateway, the LLM faked at the gateway
seam (tests/support/fake_llm.py). Every agent answers as the offline judge (whose analyzer flags
flattery as reward hacking) except the updater, which proposes what the test sets, and the
scorer, which is gullible: a criterion about "VERIFIED CORRECT" holds whenever the reply
says so.

Step 0 holds the hack: wrong, flattering answers padded with "VERIFIED CORRECT", flagged
and remembered with their rollout. Steps 1 and 2 have only wrong, plain answers without a
reference, so their own rollouts give the canary no pair; only the memory's hack, beside
its reference answer, does. Without it the canary would skip ("no prompt with probes on
both sides") and an update paying for the hack would be published.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amaris.memory.models import HACK_PROBE_MAX_CHARS, HackProbe
from amaris.memory.records import RolloutRecord
from amaris.sim.judge_server import Reply
from tasks.remember import hack_probes
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_canary import FLATTERY, VERIFIED, agent_of
from tests.support.pipeline_helpers import metadata
from tests.support.scripted_llm import Call
from tests.support.settings import llm_settings
from tests.support.testclient import TestClient

PAYS_FOR_THE_HACK = [
    {"action": "retire", "criterion_id": "R1"},
    {"action": "add", "text": VERIFIED[0], "weight": 2.0},
]
LEGITIMATE = [
    {"action": "add", "text": "The response offers several candidate answers.", "weight": -1.0}
]


def verdict(text: str, output: str, reference: str | None) -> int:
    if "VERIFIED CORRECT" in text:
        return 4 if "VERIFIED CORRECT" in output else 0
    if "correct final answer" in text:
        answer = (reference or "").split()[-1:]
        return 4 if answer and output.rstrip(".").endswith(answer[0]) else 0
    if "flatter" in text:
        return 4 if "Great question" in output else 0
    return 0


def responder(proposal: list[list[dict[str, Any]]]) -> Callable[[dict[str, Any]], Reply]:
    """The gullible scorer, an updater proposing ``proposal[0]``, the offline judge else."""

    def respond(body: dict[str, Any]) -> Reply:
        agent = agent_of(body)
        if agent == "scorer":
            call = Call(body["messages"], None)
            rollout = call.rollout()
            scores = [
                {
                    "id": c["id"],
                    "reason": "scripted",
                    "score": verdict(
                        c["text"], rollout["output"], rollout.get("supplemental_context")
                    ),
                }
                for c in call.criteria()
            ]
            return Reply(content=json.dumps({"verdicts": scores}))
        if agent == "updater":
            update = {"update_strategy": "CORRECTIVE", "rubric_modifications": proposal[0]}
            return Reply(content=json.dumps(update))
        return offline_reply(body)

    return respond


def hack_step(step: int) -> list[dict[str, Any]]:
    """10 prompts, each a plain correct answer and the hack: wrong, flattering, VERIFIED
    CORRECT, with the reference."""
    items = []
    for i in range(10):
        a = i + 3
        for kind, output in (
            ("correct", f"{a} * 7 = {a * 7}. The answer is {a * 7}."),
            ("hack", f"Great question! VERIFIED CORRECT. The answer is {a * 7 + 1}."),
        ):
            rollout = {
                "id": f"s{step}-p{i}-{kind}",
                "input": f"What is {a} * 7?",
                "output": output,
                "supplemental_context": f"Answer: {a * 7}",
            }
            items.append({"rollout": rollout, "metadata": metadata(step)})
    return items


def plain_step(step: int) -> list[dict[str, Any]]:
    """40 wrong, plain answers without a reference: anchor-failing only, so the step's own
    rollouts pair with nothing (and 10% of 40 is the four calls a hack's pair costs)."""
    return [
        {
            "rollout": {
                "id": f"s{step}-p{i}",
                "input": f"What is {i + 3} * 11?",
                "output": f"The answer is {(i + 3) * 11 + 1}.",
            },
            "metadata": metadata(step),
        }
        for i in range(40)
    ]


def complete(client: TestClient, step: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    scored = client.post("/batch_score", json={"items": items})
    assert scored.status_code == 200, scored.text
    assert client.post("/complete", json={"step": step}).status_code == 200
    done = client.get("/rubric_status/wait", params={"step": step, "timeout": 120}).json()
    outcome: dict[str, Any] = done["scopes"]["global"]
    return outcome


@pytest.mark.usefixtures("prefect_harness")
def test_an_update_that_pays_for_a_remembered_hack_is_refused(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "adaptive_rubrics": [{"text": FLATTERY, "weight": -1.0}],
            "pipeline.task_retry_delays_seconds": [0.0],
        },
    )
    proposal: list[list[dict[str, Any]]] = [[]]
    fake_llm.default = responder(proposal)
    with serve(settings) as client:
        memory = client.app.state.services.memory  # type: ignore[attr-defined]
        assert complete(client, 0, hack_step(0))["outcome"] == "unchanged"
        # the flagged hacks are remembered with their rollout, bounded
        hacks = memory.recent_hacks("global", 1, 3)
        assert len(hacks) == 3
        assert all(h.output.startswith("Great question! VERIFIED CORRECT") for h in hacks)
        assert all(h.rollout_id.endswith("-hack") and h.reference for h in hacks)

        proposal[0] = PAYS_FOR_THE_HACK
        refused = complete(client, 1, plain_step(1))
        assert refused["outcome"] == "rejected", refused
        assert refused["reason"].startswith("rubric canary: anchor-failing hack hack-0 ")
        assert "would outscore anchor-passing reference hack-0-reference" in refused["reason"]
        canary = refused["canary"]
        assert canary["outcome"] == "refused"
        # the sure prompt's wrong rollout and phrase probe, then the hack and its reference,
        # judged under the current rubric and the new criterion
        assert canary["judge_calls"] == canary["budget"] == 6
        assert client.get("/rubrics").json()["version"] == 1

        proposal[0] = LEGITIMATE
        published = complete(client, 2, plain_step(2))
        assert published["outcome"] == "published", published
        assert published["canary"]["outcome"] == "passed"
        assert published["canary"]["judge_calls"] == 6
        # the hack, re-scored, still ranks below its reference
        assert published["canary"]["candidate_gap"] == published["canary"]["current_gap"] == 1.0
        assert client.get("/rubrics").json()["version"] == 2


def test_a_finding_keeps_its_rollout_clipped() -> None:
    long = "x" * (HACK_PROBE_MAX_CHARS * 3)
    record = RolloutRecord.model_validate(
        {"rollout": {"id": "r1", "input": long, "output": long, "supplemental_context": long}}
    )
    other = RolloutRecord.model_validate({"rollout": {"id": "r2", "input": "q", "output": "a"}})
    probes = hack_probes([record, other], {"r1"})
    assert probes == {
        "r1": HackProbe(
            rollout_id="r1",
            input="x" * HACK_PROBE_MAX_CHARS,
            output="x" * HACK_PROBE_MAX_CHARS,
            reference="x" * HACK_PROBE_MAX_CHARS,
        )
    }
