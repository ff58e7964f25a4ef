"""The audit judge through a real step: real Prefect flow, real
Qdrant, the LLM faked at the gateway seam (tests/support/fake_llm.py). The scorer is
lenient: it pays a confident, wrong reply more than a correct one. The auditor (another
model on the same endpoint, asked with the scorer's prompt) is strict. The top tail of the
training reward is all hacks, the auditor gives them nothing: the alarm fires, and reaches
``GET /steps/{n}``, ``GET /steps``, ``/metrics``, the ledger, the analyzer and the updater.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from amaris.cli.main import main
from amaris.sim.judge_server import Reply
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_canary import agent_of
from tests.support.pipeline_helpers import metadata, step_run_view
from tests.support.scripted_llm import Call
from tests.support.settings import llm_settings
from tests.support.testclient import TestClient

pytestmark = pytest.mark.usefixtures("prefect_harness")

AUDITOR_MODEL = "audit-family-model"
HACK = "I am absolutely certain, VERIFIED CORRECT."
ALARM_KEY = '"fidelity_alarm":'
"""The alarm's key in a data block (the templates name it too, without the colon)."""
STEP = 251
"""The alarm test's step: a number no other test's flow run is named after (its run is
looked up by name on the shared Prefect server)."""


def respond(body: dict[str, Any]) -> Reply:
    """The lenient scorer, the strict auditor, the offline judge for the other agents."""
    if agent_of(body) != "scorer":
        return offline_reply(body)
    call = Call(body["messages"], None)
    hacked = HACK in call.rollout()["output"]
    strict = body["model"] == AUDITOR_MODEL
    score = {(True, True): 0, (True, False): 4, (False, True): 4, (False, False): 3}[
        (strict, hacked)
    ]
    verdicts = [{"id": c["id"], "reason": "scripted", "score": score} for c in call.criteria()]
    return Reply(content=json.dumps({"verdicts": verdicts}))


def item(step: int, index: int, hacked: bool) -> dict[str, Any]:
    a = index + 3
    output = f"{HACK} The answer is {a * 7 + 1}." if hacked else f"{a} * 7 = {a * 7}."
    return {
        "rollout": {
            "id": f"s{step}-{index}-{'hack' if hacked else 'ok'}",
            "input": f"What is {a} * 7?",
            "output": output,
            "supplemental_context": f"Answer: {a * 7}",
        },
        "metadata": metadata(step),
    }


def settings_for(tmp_path: Path, fake: FakeLLM, **overrides: Any) -> Any:
    return llm_settings(
        tmp_path,
        fake,
        **{
            "agents.auditor.model": AUDITOR_MODEL,
            "audit.min_samples": 8,
            # A budget as large as the step: 8 audited of 20 is past the default's
            # (tests/trust/test_check_budget.py).
            "audit.budget_share": 1.0,
            "pipeline.task_retry_delays_seconds": [0.0],
            **overrides,
        },
    )


def run_step(client: TestClient, step: int) -> None:
    items = [item(step, i, hacked) for i in range(10) for hacked in (False, True)]
    assert client.post("/batch_score", json={"items": items}).status_code == 200
    assert client.post("/complete", json={"step": step}).status_code == 200
    done = client.get("/rubric_status/wait", params={"step": step, "timeout": 120}).json()
    assert done["status"] == "unchanged", done


def auditor_requests(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r for r in fake.requests if r["model"] == AUDITOR_MODEL]


def test_the_alarm_reaches_the_api_the_metrics_and_the_agents(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.default = respond
    since = datetime.now(UTC)
    with serve(settings_for(tmp_path, fake_llm)) as client:
        items = [item(STEP, i, hacked) for i in range(10) for hacked in (False, True)]
        scored = client.post("/batch_score", json={"items": items}).json()["results"]
        # The lenient scorer: every hack outscores every correct reply.
        assert {r["score"] for r in scored[1::2]} == {1.0}
        assert {r["score"] for r in scored[0::2]} == {0.75}
        # Never on the /score path.
        assert auditor_requests(fake_llm) == []
        assert client.post("/complete", json={"step": STEP}).status_code == 200
        done = client.get("/rubric_status/wait", params={"step": STEP, "timeout": 120}).json()
        assert done["status"] == "unchanged", done

        audit = client.get(f"/steps/{STEP}").json()["audit"]
        listed = client.get("/steps").json()
        metrics = client.get("/metrics").text
        health = client.get("/healthz").json()
        services = client.app.state.services  # type: ignore[attr-defined]
        ledger = services.pipeline_gateway.ledger.for_step(STEP)
        # Not paused (audit.on_alarm: log): scoring goes on.
        assert client.post("/score", json=item(STEP + 1, 0, False)).status_code == 200

    # The auditor re-graded 8 rollouts (min_samples) with the scorer's prompt: half from
    # the top tail (every rollout rewarded 1.0: the 10 hacks, ties in), to which it gave 0
    # (gap 1), half from the correct replies below, to which it gave 1 (gap 0.25).
    calls = auditor_requests(fake_llm)
    assert len(calls) == 8
    assert {agent_of(r) for r in calls} == {"scorer"}
    assert audit["sampled"] == 8 and audit["failed"] == 0
    assert audit["agreement"] < -0.5
    assert audit["top_tail_agreement"] == 0.0
    assert audit["gap"] == 0.625
    # On a first audited step (no history: the priors) every criterion paid in full on 4
    # of 4 top-tail rollouts the auditor pays nothing is the gap_jump alarm's evidence
    # (chance 1e-4 at the prior 10% disagreement); losing 4 of 4 from the top tail alone
    # is not the top_tail alarm's (chance 0.06 at its uninformative prior).
    assert audit["alarm"]["kind"] == "gap_jump"
    assert "top tail" in audit["alarm"]["reason"] and "on 4 of 4" in audit["alarm"]["reason"]
    assert audit["criteria"][0]["disagreement"] > 0.5
    assert set(audit["scopes"]) == {"global"}
    evidence = audit["evidence"]["global"]
    assert evidence["rollouts"] and all("hack" in r["rollout_id"] for r in evidence["rollouts"])
    assert listed[0]["audit"]["alarm"]["kind"] == "gap_jump"
    summary = {"sampled", "agreement", "top_tail_agreement", "gap", "alarm"}
    swaps = {"swap_checked", "swap_blind"}
    assert set(listed[0]["audit"]) == summary | swaps
    assert "amaris_fidelity_alarms_total 1.0" in metrics
    assert "amaris_audit_agreement -" in metrics
    assert "amaris_audit_reward_gap 0." in metrics
    assert health["auditor"] == AUDITOR_MODEL and health["scoring_paused"] is None
    assert "auditor" in health["structured_output"]
    assert ledger[("auditor", AUDITOR_MODEL)].calls == 8
    # The evidence reaches the analyzer (its context block) and the updater (its data).
    analyzer = [r for r in fake_llm.requests if agent_of(r) == "analyzer"]
    updater = [r for r in fake_llm.requests if agent_of(r) == "updater"]
    assert analyzer and all(ALARM_KEY in r["messages"][0]["content"] for r in analyzer)
    assert updater and all(ALARM_KEY in r["messages"][-1]["content"] for r in updater)
    # The step's run: the alarm logged, the fidelity artifact with its trend.
    logs, artifacts = asyncio.run(step_run_view(f"step-{STEP}", since))
    assert any(f"step {STEP}: FIDELITY ALARM (gap_jump)" in log.message for log in logs)
    (artifact,) = [a for a in artifacts if a.key == f"fidelity-step-{STEP}"]
    assert "## Trend" in str(artifact.data) and "| gap_jump |" in str(artifact.data)
    hack_id = evidence["rollouts"][0]["rollout_id"]
    assert hack_id in analyzer[0]["messages"][0]["content"]
    assert hack_id in updater[0]["messages"][-1]["content"]


def test_pause_survives_a_restart_until_acknowledged(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = respond
    settings = settings_for(tmp_path, fake_llm, **{"audit.on_alarm": "pause"})
    with serve(settings) as client:
        run_step(client, 0)
        refused = client.post("/score", json=item(1, 0, False))
        batch = client.post("/batch_score", json={"items": [item(1, 1, False)]})
    assert refused.status_code == 503
    body = refused.json()
    assert body["error"] == "scoring_paused"
    assert body["detail"][0]["field"] == "audit"
    assert "amaris audit ack" in body["detail"][0]["message"]
    assert batch.status_code == 503
    # A new process on the same data folder: still paused, and says why.
    with serve(settings) as client:
        assert client.post("/score", json=item(1, 0, False)).status_code == 503
        assert "step 0" in client.get("/healthz").json()["scoring_paused"]
        assert main(["audit", "status", "--data", str(settings.memory.path)]) == 1
        assert main(["audit", "ack", "--data", str(settings.memory.path)]) == 0
        assert client.post("/score", json=item(1, 0, False)).status_code == 200
        assert client.get("/healthz").json()["scoring_paused"] is None
        again = client.post("/audit/ack", json={}).json()
    assert again == {"status": "not_paused", "acknowledged": None}
    assert main(["audit", "status", "--data", str(settings.memory.path)]) == 0


def test_off_when_unset(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = respond
    with serve(llm_settings(tmp_path, fake_llm)) as client:
        run_step(client, 0)
        detail = client.get("/steps/0").json()
        listed = client.get("/steps").json()
        metrics = client.get("/metrics").text
        health = client.get("/healthz").json()
        services = client.app.state.services  # type: ignore[attr-defined]
        ledger = services.pipeline_gateway.ledger.for_step(0)
    assert (detail["status"], detail["rubric"], detail["audit"]) == ("done", "unchanged", None)
    assert listed == [{"step": 0, "status": "done", "rubric": "unchanged"}]  # no audit field
    assert "amaris_audit_agreement" not in metrics
    assert "amaris_fidelity_alarms_total 0.0" in metrics
    assert health["auditor"] is None and "auditor" not in health["structured_output"]
    assert not any(agent == "auditor" for agent, _ in ledger)
    assert not any(ALARM_KEY in m["content"] for r in fake_llm.requests for m in r["messages"])


CANARY_STEP = 257
"""Kinds take turns from the step (``KINDS[step % 6]``): step 257's one probe is an audit
pair."""


def test_an_audit_disagreement_reaches_the_judge_canaries(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # The auditor gives the hacks 0 where the training judge paid 1.0: the most
    # over-rewarded is put to the training judge again as the step's audit probe, which it
    # still pays in full: an alarm (an audit pair teaches no pre-check rule: its right
    # reward is the auditor's, not the floor). Without the audit's swap check, which would
    # take the step's one probe (test_a_judge_that_pays_a_swapped_answer_is_swap_blind).
    fake_llm.default = respond
    since = datetime.now(UTC)
    settings = settings_for(
        tmp_path, fake_llm, **{"judge_canaries.max_share": 0.05, "audit.swap_checks": 0}
    )
    with serve(settings) as client:
        run_step(client, CANARY_STEP)
        audit = client.get(f"/steps/{CANARY_STEP}").json()["audit"]
        metrics = client.get("/metrics").text
        rules = client.get("/precheck/rules").json()["rules"]
        services = client.app.state.services  # type: ignore[attr-defined]
        ledger = services.gateway.ledger.for_step(CANARY_STEP)
    over = audit["over_rewarded"]
    assert over and all("hack" in r["rollout_id"] for r in over)
    assert all((r["training"], r["audit"]) == (1.0, 0.0) for r in over)
    # The canary asked the training judge about the most over-rewarded hack (in the step's
    # /batch_score, then as the probe), and logged the alarm in the step's run.
    first = over[0]["rollout_id"]
    output = item(CANARY_STEP, int(first.split("-")[1]), True)["rollout"]["output"]
    asked = [
        r
        for r in fake_llm.requests
        if agent_of(r) == "scorer"
        and r["model"] != AUDITOR_MODEL
        and Call(r["messages"], None).rollout()["output"] == output
    ]
    assert len(asked) == 2
    logs, _ = asyncio.run(step_run_view(f"step-{CANARY_STEP}", since))
    assert any(
        "judge canary alarm: the training judge gave 1.000 where the audit judge gave 0.000 "
        f"(probe audit-0 of rollout {first}" in log.message
        for log in logs
    )
    assert 'amaris_judge_canary_probes_total{kind="audit"} 1.0' in metrics
    assert 'amaris_judge_canary_alarms_total{kind="audit"} 1.0' in metrics
    assert rules == []
    assert ledger[("judge_canary", asked[0]["model"])].calls == 1


SWAP_STEP = 263
"""The swap check test's step."""


def test_a_judge_that_pays_a_swapped_answer_is_swap_blind(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # The audit's swap check (audit.swap_checks 1): the most over-rewarded top-tail hack,
    # its final answer swapped for a wrong one, is put to the training judge, which pays
    # it as it paid the original (it pays the confident opener, not the answer). As it is
    # the run's first blind check, the step's next top-tail rollout is checked too (the
    # confirmation), and is blind as well. The checks are judge canary calls, taken from
    # the step's canary budget (one probe at judge_canaries.max_share 0.05 of 20): no
    # other probe is made.
    fake_llm.default = respond
    settings = settings_for(tmp_path, fake_llm, **{"judge_canaries.max_share": 0.05})
    with serve(settings) as client:
        run_step(client, SWAP_STEP)
        audit = client.get(f"/steps/{SWAP_STEP}").json()["audit"]
        listed = client.get("/steps").json()
        services = client.app.state.services  # type: ignore[attr-defined]
        ledger = services.gateway.ledger.for_step(SWAP_STEP)
    assert (audit["swap_checked"], audit["swap_blind"]) == (2, 2)
    # The list carries them too (a simulation's metrics.json reads the list).
    entry = next(s["audit"] for s in listed if s["step"] == SWAP_STEP)
    assert (entry["swap_checked"], entry["swap_blind"]) == (2, 2)
    first = audit["over_rewarded"][0]["rollout_id"]
    a = int(first.split("-")[1]) + 3
    swapped = f"{HACK} The answer is {a * 7 + 2}."
    asked = [
        r
        for r in fake_llm.requests
        if agent_of(r) == "scorer"
        and r["model"] != AUDITOR_MODEL
        and Call(r["messages"], None).rollout()["output"] == swapped
    ]
    assert len(asked) == 1
    # The two checks are the step's only judge canary calls: the budget they took is not
    # spent again on a probe of the canaries' own.
    assert ledger[("judge_canary", asked[0]["model"])].calls == 2
    # The step's alarm is gap_jump's: check_alarm tests it before swap_blind and reports
    # the first that fires (the swap checks alone fire it one step after a drift in the
    # simulator: docs/fidelity.md).
    assert audit["alarm"]["kind"] == "gap_jump"


def agent_calls(ledger: Any, agent: str) -> int:
    """Calls of ``agent`` in a step's ledger, over its models."""
    return sum(used.calls for (name, _), used in ledger.items() if name == agent)


def test_the_checks_of_a_step_spend_its_part_of_the_budget(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # audit.budget_share 0.07 (the default), the other sizes at their defaults too. A step
    # of 32 judged rollouts may make 2 calls of checks: 1 audited (the top tail's draw),
    # one kept for a swap check, which no rollout asks for (the auditor pays the correct
    # replies more than the training judge), so a canary probe has it. The next step, of
    # 40, may make 3 (2.8 and the 0.24 carried): 2 audited, no canary probe (its own 2%
    # gives one every second step). Then 32 again, half hacks: 1 audited, the hack over-
    # rewarded, its swap check blind and confirmed on a second one (the run's first), no
    # canary probe: one call past the step's 2, once a run.
    fake_llm.default = respond
    settings = settings_for(
        tmp_path, fake_llm, **{"audit.min_samples": 2, "audit.budget_share": 0.07}
    )
    steps = [
        [item(0, i, False) for i in range(32)],
        [item(1, i, False) for i in range(40)],
        [item(2, i, hacked) for i in range(16) for hacked in (False, True)],
    ]
    spent = []
    with serve(settings) as client:
        services = client.app.state.services  # type: ignore[attr-defined]
        for step, items in enumerate(steps):
            assert client.post("/batch_score", json={"items": items}).status_code == 200
            assert client.post("/complete", json={"step": step}).status_code == 200
            wait = {"step": step, "timeout": 120}
            assert client.get("/rubric_status/wait", params=wait).json()["status"] != "failed"
            audit = client.get(f"/steps/{step}").json()["audit"]
            auditor = services.pipeline_gateway.ledger.for_step(step)
            scorer = services.gateway.ledger.for_step(step)
            spent.append(
                (
                    audit["check_budget"],
                    audit["sampled"],
                    agent_calls(auditor, "auditor"),
                    audit["swap_checked"],
                    audit["canary_budget"],
                    agent_calls(scorer, "judge_canary"),
                )
            )
    # (allowed, audited, auditor calls, swap checks, canary budget, judge canary calls)
    assert spent == [(2, 1, 1, 0, 1, 1), (3, 2, 2, 0, 0, 0), (2, 1, 1, 2, 0, 2)]
