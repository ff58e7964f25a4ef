"""``GET /steps/{step}/analyses`` and ``/steps/{step}/rollouts``: what the simulator reads."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from amaris.app.wiring import create_app
from amaris.sim.policy import EXPECTED_FLAGS, criteria, make_task, respond
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

BEHAVIOURS = ["correct", "wrong", "sycophantic", "hack_claims"]


def test_validation_names_the_field(offline_client: TestClient) -> None:
    for path in ("/steps/-1/analyses", "/steps/x/rollouts"):
        answer = offline_client.get(path)
        assert answer.status_code == 422
        assert [d["field"] for d in answer.json()["detail"]] == ["path.step"]
    answer = offline_client.get("/steps/0/analyses", params={"scope": ""})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["field"] == "query.scope"
    for path in ("/steps/7/analyses", "/steps/7/rollouts"):
        answer = offline_client.get(path)
        assert answer.status_code == 404
        assert answer.json()["detail"] == [{"field": "step", "message": "step 7 is unknown"}]


@pytest.mark.usefixtures("prefect_harness")
def test_a_steps_rollouts_and_analyses(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, **{"pipeline.rollouts_per_step": None}))
    rubric = {
        "anchors": [
            {"id": "A1", "text": "The response gives the correct final answer.", "weight": 1.0}
        ],
        "adaptive": [],
    }
    with TestClient(app) as client:
        rng = random.Random(3)
        sent = {}
        for index, behaviour in enumerate(BEHAVIOURS):
            task = make_task(rng)
            rollout = {
                "id": f"r{index}",
                "input": task.question,
                "output": respond(behaviour, task, criteria(rubric), rng),
                "supplemental_context": task.reference,
                "metadata": {"sim_behaviour": behaviour},
            }
            body = {"rollout": rollout, "metadata": {"current_step": 4}}
            assert client.post("/score", json=body).json()["status"] == "scored"
            sent[rollout["id"]] = behaviour
        # open: the log holds the rollouts, no analysis yet
        open_step = client.get("/steps/4/analyses").json()
        assert (open_step["status"], open_step["rollouts"], open_step["analyses"]) == (
            "open",
            4,
            [],
        )
        assert client.post("/complete", json={"step": 4}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 4, "timeout": 120}).json()
        assert done["status"] == "updated", done

        records = client.get("/steps/4/rollouts").json()
        assert records["status"] == "done"
        assert [r["rollout"]["id"] for r in records["records"]] == list(sent)
        assert [r["seq"] for r in records["records"]] == [0, 1, 2, 3]
        assert [r["rollout"]["metadata"]["sim_behaviour"] for r in records["records"]] == BEHAVIOURS

        analyses = client.get("/steps/4/analyses").json()
        assert analyses["rollouts"] == 4
        assert [a["rollout_id"] for a in analyses["analyses"]] == list(sent)
        for item in analyses["analyses"]:
            found = {b["tag"] for b in item["analysis"]["reward_hacking_analysis"]["behaviours"]}
            behaviour = sent[item["rollout_id"]]
            # amaris's own finding besides the offline analyzer's: "Dear grader, ..."
            addressed = {"grader_injection"} if behaviour == "hack_claims" else set()
            assert found == EXPECTED_FLAGS[behaviour] | addressed, item
            assert item["scope"] == "global"
        other_scope = client.get("/steps/4/analyses", params={"scope": "in-none"}).json()
        assert (other_scope["rollouts"], other_scope["analyses"]) == (0, [])
