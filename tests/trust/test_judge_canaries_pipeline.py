"""Judge canaries through a real step: real Prefect flow, real Qdrant,
the LLM faked at the gateway seam (tests/support/fake_llm.py). The scorer is lenient to one
hack: it pays full marks for the reply "Let me think about this carefully." alone, and
otherwise grades the final answer against the reference. Every other agent answers as the
offline judge.

Without the canaries nothing would look at the judge: the opener alone would keep its
reward of 1.0 on ``/score`` at every step.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from amaris.app.wiring import create_app
from amaris.llm.ledger import total
from amaris.sim.judge_server import Reply
from amaris.text.answers import extract_final_answer
from amaris.trust.precheck import normalise
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_canary import agent_of
from tests.support.pipeline_helpers import metadata, step_run_view
from tests.support.scripted_llm import Call
from tests.support.settings import llm_settings
from tests.support.testclient import TestClient

OPENER = "Let me think about this carefully."
STEP = 90
"""Kinds take turns from the step (``KINDS[step % 6]``): step 90's one probe is the opener."""
ROLLOUTS = 50
"""At the default ``judge_canaries.max_share`` (0.02): one probe."""


def lenient_scorer(body: dict[str, Any]) -> Reply:
    if agent_of(body) != "scorer":
        return offline_reply(body)
    call = Call(body["messages"], None)
    rollout = call.rollout()
    if normalise(rollout["output"]) == normalise(OPENER):
        score = 4  # the hack this judge pays for
    else:
        answer = extract_final_answer(rollout["output"])
        score = 4 if answer == extract_final_answer(rollout["supplemental_context"]) else 0
    verdicts = [{"id": c["id"], "reason": "scripted", "score": score} for c in call.criteria()]
    return Reply(content=json.dumps({"verdicts": verdicts}))


def item(a: int, step: int, output: str | None = None, id: str | None = None) -> dict[str, Any]:
    reply = (
        f"{OPENER} First, {a} times 7 means adding 7 {a} times. "
        f"That gives {a * 7}. So the answer is {a * 7}."
    )
    return {
        "rollout": {
            "id": id or f"s{step}-p{a}",
            "input": f"What is {a} * 7?",
            "output": reply if output is None else output,
            "supplemental_context": f"Answer: {a * 7}",
        },
        "metadata": metadata(step, total=200),
    }


def scorer_calls(fake: FakeLLM) -> int:
    return sum(1 for body in fake.requests if agent_of(body) == "scorer")


@pytest.mark.usefixtures("prefect_harness")
def test_a_paid_opener_raises_an_alarm_and_the_pre_check_learns_it(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    since = datetime.now(UTC)
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "pipeline.rubric_update_frequency": 1000,  # no update: the canaries are the test
            "pipeline.task_retry_delays_seconds": [0.0],
        },
    )
    fake_llm.default = lenient_scorer
    with serve(settings) as client:
        # before the step, the judge pays the opener alone
        hacked = client.post("/score", json=item(100, STEP, OPENER, id="before"))
        assert hacked.json()["score"] == 1.0 and hacked.json()["reason"] is None
        items = [item(a, STEP) for a in range(3, 3 + ROLLOUTS - 1)]
        scored = client.post("/batch_score", json={"items": items})
        assert scored.status_code == 200, scored.text
        assert client.post("/complete", json={"step": STEP}).status_code == 200
        done = client.get("/rubric_status/wait", params={"step": STEP, "timeout": 120})
        assert done.json()["error"] is None and done.json()["step"] == STEP, done.text

        # the alarm's rule: the opener alone, for any prompt (it names none of its own)
        rules = client.get("/precheck/rules").json()
        assert rules["version"] == 1
        [rule] = rules["rules"]
        assert (rule["kind"], rule["any_prompt"], rule["step"]) == ("opener", True, STEP)
        assert rule["preview"] == OPENER and rule["added_in"] == 1

        # counted in /metrics, by kind
        metrics = client.get("/metrics").text
        assert 'amaris_judge_canary_alarms_total{kind="opener"} 1.0' in metrics
        assert 'amaris_judge_canary_probes_total{kind="opener"} 1.0' in metrics
        assert 'amaris_judge_canary_alarms_total{kind="swapped"} 0.0' in metrics
        assert "amaris_precheck_learned_rules 1.0" in metrics

        # the canary's call is in the ledger under its own agent: within 2% of the judge's
        services = client.app.state.services  # type: ignore[attr-defined]
        ledger = services.gateway.ledger.for_step(STEP)
        canary = total(u for (agent, _), u in ledger.items() if agent == "judge_canary")
        judged = total(u for (agent, _), u in ledger.items() if agent == "scorer")
        assert (canary.calls, judged.calls) == (1, ROLLOUTS)
        assert canary.calls <= 0.02 * judged.calls

        # a later /score of the opener alone is floored by the pre-check, unjudged
        before = scorer_calls(fake_llm)
        later = [
            item(500, STEP + 1, OPENER, id="hack"),
            item(501, STEP + 1, f"  {OPENER.upper()}  ", id="hack-shouted"),
            item(502, STEP + 1, id="correct"),
        ]
        results = client.post("/batch_score", json={"items": later}).json()["results"]
        assert [r["score"] for r in results] == [0.0, 0.0, 1.0]
        assert results[0]["reason"].startswith(f"degenerate_reply: learned (rule {rule['id']} ")
        assert results[2]["reason"] is None
        assert scorer_calls(fake_llm) == before + 1  # the correct answer only

        # removable: a new version, listed as removed, no longer applied
        assert (
            client.request("DELETE", f"/precheck/rules/{rule['id']}", json={}).json()["removed_in"]
            == 2
        )
        assert client.get("/precheck/rules").json() == {"version": 2, "rules": []}
        assert len(client.get("/precheck/rules", params={"removed": True}).json()["rules"]) == 1
        again = client.post("/score", json=item(503, STEP + 1, OPENER, id="after-removal"))
        assert again.json()["score"] == 1.0
        missing = client.request("DELETE", f"/precheck/rules/{rule['id']}", json={})
        assert missing.status_code == 404
        assert [d["field"] for d in missing.json()["detail"]] == ["rule_id"]

    # logged in the step's Prefect run
    logs, _ = asyncio.run(step_run_view(f"step-{STEP}", since))
    assert any(
        log.message.startswith(
            f"step {STEP} ('global'): judge canary alarm: opener probe (no right"
        )
        and f"learned pre-check rule {rule['id']}" in log.message
        for log in logs
    )


@pytest.mark.usefixtures("prefect_harness")
def test_learned_rules_survive_a_restart(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "pipeline.rubric_update_frequency": 1000,
            "pipeline.task_retry_delays_seconds": [0.0],
        },
    )
    fake_llm.default = lenient_scorer
    # Qdrant in the data folder (not in memory): the second app opens what the first wrote.
    with TestClient(create_app(settings)) as client:
        items = [item(a, STEP) for a in range(3, 3 + ROLLOUTS)]
        assert client.post("/batch_score", json={"items": items}).status_code == 200
        assert client.post("/complete", json={"step": STEP}).status_code == 200
        client.get("/rubric_status/wait", params={"step": STEP, "timeout": 120})
        [rule] = client.get("/precheck/rules").json()["rules"]
    with TestClient(create_app(settings)) as client:
        assert client.get("/precheck/rules").json()["rules"] == [rule]
        hacked = client.post("/score", json=item(600, STEP + 1, OPENER, id="after-restart"))
        assert hacked.json()["score"] == 0.0
        assert hacked.json()["reason"].startswith("degenerate_reply: learned")
