"""Per-criterion informativeness through real Prefect steps: served by ``GET
/rubrics/stats``, shown in the step's artifacts, and an adaptive criterion flat for
``rubric.retire_uninformative_after`` steps retired with its evidence (never an anchor)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from amaris.agents.prompts import read_data
from amaris.app.wiring import create_app
from amaris.sim.judge_server import Reply
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_helpers import artifacts_keyed, score_step, step_run_view
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

pytestmark = pytest.mark.usefixtures("prefect_harness")

KEY = "stats-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
PITFALL = "The response offers several candidate answers instead of committing to one."
# 12 rollouts over 10 prompts: the first two prompts answered twice (two groups of two).
CORRECT = ["correct"] * 12


def complete(client: TestClient, step: int) -> tuple[str, dict[str, Any]]:
    """The step's wait status and its global scope's outcome, once its run is done."""
    assert client.post("/complete", json={"step": step}, headers=AUTH).status_code == 200
    done = client.get(
        "/rubric_status/wait", params={"step": step, "timeout": 120}, headers=AUTH
    ).json()
    outcome: dict[str, Any] = done["scopes"]["global"]
    return done["status"], outcome


def test_a_flat_adaptive_criterion_is_retired_after_k_steps(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        **{
            "server.api_key": KEY,
            "rubric.retire_uninformative_after": 2,
            "adaptive_rubrics": [{"text": PITFALL, "weight": -1.0}],
        },
    )
    since = datetime.now(UTC)
    app = create_app(settings, qdrant_location=":memory:")
    with TestClient(app) as client:
        client.headers.update(AUTH)
        # Every response is correct: the anchor is always 4, the pitfall always 0.
        score_step(client, 0, CORRECT)
        stats = client.get("/rubrics/stats", params={"step": 0}).json()
        [scope] = stats["scopes"]
        assert (stats["step"], scope["scope"], scope["rollouts"]) == (0, "global", 12)
        a1, r1 = scope["criteria"]
        assert (a1["id"], a1["is_anchor"], a1["mean"], a1["variance"]) == ("A1", True, 4.0, 0.0)
        assert (a1["extreme_share"], a1["at_max_share"], a1["saturated"]) == (1.0, 1.0, True)
        assert (r1["id"], r1["mean"], r1["at_min_share"], r1["uninformative"]) == (
            "R1",
            0.0,
            1.0,
            True,
        )
        assert (r1["groups"], r1["zero_spread_group_share"], r1["zero_spread"]) == (2, 1.0, True)
        assert r1["reward_correlation"] is None  # constant verdicts
        # One flat step is not enough.
        status, outcome = complete(client, 0)
        assert (status, outcome["outcome"]) == ("unchanged", "unchanged"), outcome
        assert [c["id"] for c in client.get("/rubrics").json()["adaptive"]] == ["R1"]

        score_step(client, 1, CORRECT)
        status, outcome = complete(client, 1)
        assert (status, outcome["outcome"]) == ("updated", "published"), outcome
        rubric = client.get("/rubrics").json()
        assert rubric["adaptive"] == []  # R1 retired
        assert [a["id"] for a in rubric["anchors"]] == ["A1"]  # flat too, never retired
        # the change record in memory keeps the evidence
        [update] = [
            doc
            for doc in app.state.services.memory.recent(50)
            if doc.type == "rubric_update" and doc.step == 1
        ]
        [retire] = update.doc["rubric_modifications"]
        assert (retire["action"], retire["criterion_id"]) == ("retire", "R1")
        assert retire["reason"].startswith(
            "Retired as uninformative: R1 uninformative for 2 consecutive step(s): 0 step(s) "
            "back: saturated (100% of 12 verdicts at 0) and zero spread in all 2 groups"
        )

        # bad input names the field and changes nothing; the key is needed
        for params, field in [
            ({}, "query.step"),
            ({"step": -1}, "query.step"),
            ({"step": "x"}, "query.step"),
            ({"step": 99}, "step"),
            ({"step": 1, "scope": "elsewhere"}, "scope"),
        ]:
            response = client.get("/rubrics/stats", params=params)
            assert response.status_code in (404, 422), (params, response.text)
            assert [d["field"] for d in response.json()["detail"]] == [field], response.text
        assert client.get("/rubrics/stats", params={"step": 1, "scope": "global"}).json() == (
            client.get("/rubrics/stats", params={"step": 1}).json()
        )
        client.headers.pop("Authorization")
        assert client.get("/rubrics/stats", params={"step": 1}).status_code == 401

    # An unchanged offline step logs no amaris line to its run: wait for the artifacts read.
    until = artifacts_keyed("rubric-diff-step-1-global", "criteria-step-1")
    _, artifacts = asyncio.run(step_run_view("step-1", since, until=until))
    by_key = {a.key: a for a in artifacts}
    diff = str(by_key["rubric-diff-step-1-global"].data)
    assert "| retired | R1 |" in diff
    assert "## Uninformative criteria" in diff
    assert "| R1 | retired | R1 uninformative for 2 consecutive step(s)" in diff
    assert "saturated (100% of 12 verdicts at 0) and zero spread in all 2 groups" in diff
    table = str(by_key["criteria-step-1"].data)
    assert '"criterion": "A1"' in table and '"criterion": "R1"' in table
    assert "saturated, zero spread" in table


IGNORING = {
    "memory_consultation": {"consulted": [], "insights": "Nothing relevant."},
    "rationale": {"summary": "The rubric works.", "evidence": []},
    "update_strategy": "MAINTENANCE",
    "rubric_modifications": [],
    "memory_artifact": {"text": "No change."},
}
"""An LLM updater's reply that leaves the uninformative criterion as it is."""


def test_amaris_retires_a_criterion_the_llm_updater_leaves(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    updater_data: list[dict[str, Any]] = []

    def judge(body: dict[str, Any]) -> Reply:
        data = read_data(body["messages"])
        if data.get("agent") != "updater":
            return offline_reply(body)
        updater_data.append(data)
        return Reply(content=json.dumps(IGNORING))

    fake_llm.default = judge
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "rubric.retire_uninformative_after": 1,
            "adaptive_rubrics": [{"text": PITFALL, "weight": -1.0}],
        },
    )
    with TestClient(create_app(settings, qdrant_location=":memory:")) as client:
        score_step(client, 0, CORRECT)
        status, outcome = complete(client, 0)
        assert (status, outcome["outcome"], outcome["retired_uninformative"]) == (
            "updated",
            "published",
            ["R1"],
        )
        assert client.get("/rubrics").json()["adaptive"] == []
    # the updater was told, with the figures and the evidence
    [data] = updater_data
    stats = {row["id"]: row for row in data["criterion_stats"]}
    assert stats["R1"] == {
        "id": "R1",
        "verdicts": 12,
        "mean": 0.0,
        "variance": 0.0,
        "extreme_share": 1.0,
        "zero_spread_group_share": 1.0,
        "reward_correlation": None,
        "saturated": True,
        "zero_spread": True,
        "uninformative_steps": 1,
    }
    assert stats["A1"]["uninformative_steps"] == 1  # measured, never listed
    [due] = data["uninformative"]
    assert (due["criterion_id"], due["steps"]) == ("R1", 1)
    assert "saturated (100% of 12 verdicts at 0)" in due["evidence"]
