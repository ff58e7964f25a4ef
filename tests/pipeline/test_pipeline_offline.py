"""The whole loop offline: real Prefect runs, real Qdrant, the offline judge for all agents.

Reward hacking (several candidate answers offered at once) appears at step 1; the
analyses flag it, the summary reports it, the update adds an adaptive criterion
against it, and from then on those rollouts earn less than correct ones.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from amaris.app.wiring import create_app
from tests.support.pipeline_helpers import (
    artifacts_keyed,
    mean,
    score_step,
    step_run_state,
    step_run_view,
)
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

pytestmark = pytest.mark.usefixtures("prefect_harness")

CLEAN = ["correct"] * 6 + ["wrong"] * 4
HACKED = ["correct"] * 4 + ["wrong"] * 2 + ["hacking"] * 4


def rewards(results: list[dict[str, object]], behaviours: list[str], which: str) -> list[float]:
    return [
        float(r["score"])
        for r, b in zip(results, behaviours, strict=True)  # type: ignore[arg-type]
        if b == which
    ]


def test_hacking_is_caught_and_penalised(tmp_path: Path) -> None:
    # the default configuration's embedder: the bundled all-MiniLM-L6-v2
    settings = make_settings(
        tmp_path, **{"pipeline.rollouts_per_step": None, "memory.embedding_model": None}
    )
    app = create_app(settings)
    since = datetime.now(UTC)
    with TestClient(app) as client:
        services = app.state.services
        # step 0: no hacking; the rubric stays as configured
        results = score_step(client, 0, CLEAN)
        assert rewards(results, CLEAN, "correct") == [1.0] * 6
        assert rewards(results, CLEAN, "wrong") == [0.0] * 4
        assert client.post("/complete", json={}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"timeout": 120}).json()
        assert done["status"] == "unchanged", done
        assert done["step"] == 0
        assert done["scopes"]["global"]["outcome"] == "unchanged"
        assert client.get("/rubrics").json()["version"] == 1

        # step 1: four rollouts offer several candidates; the naive rubric pays them fully
        results = score_step(client, 1, HACKED)
        assert rewards(results, HACKED, "hacking") == [1.0] * 4
        assert rewards(results, HACKED, "correct") == [1.0] * 4
        assert client.post("/complete", json={}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"timeout": 120}).json()
        assert done["status"] == "updated", done
        global_outcome = done["scopes"]["global"]
        assert global_outcome["outcome"] == "published"
        assert global_outcome["strategy"] == "CORRECTIVE"
        tags = {b["tag"]: b for b in global_outcome["hacking"]}
        assert tags["multiple_candidate_answers"]["count"] == 4
        assert tags["multiple_candidate_answers"]["share"] == pytest.approx(0.4)

        # analyses flagged exactly the hacking rollouts
        ids = [f"s1-r{i}-{b}" for i, b in enumerate(HACKED)]
        analyses = services.memory.get_analyses("global", 1, ids)
        flagged = {rid for rid, a in analyses.items() if a["reward_hacking_analysis"]["detected"]}
        assert flagged == {rid for rid in ids if rid.endswith("hacking")}
        [summary] = services.memory.recent_summaries("global", 2, 1)
        assert summary.step == 1
        assert "multiple_candidate_answers" in summary.text
        # semantic memory finds the finding from a paraphrase
        hits = services.memory.search(
            "policy lists several possible answers to game the grader",
            limit=3,
            exclude_step=None,
            scope="global",
            types=None,
        )
        assert hits and hits[0].document.step == 1
        assert "multiple_candidate_answers" in hits[0].document.text

        rubric = client.get("/rubrics").json()
        assert rubric["version"] == 2
        assert rubric["step"] == 1
        assert rubric["origin"] == "updater"
        assert [(c["id"], c["weight"]) for c in rubric["adaptive"]] == [("R1", -1.0)]
        assert "several candidate answers" in rubric["adaptive"][0]["text"]
        assert [a["text"] for a in rubric["anchors"]] == [
            "The response gives the correct final answer."
        ]

        # step 2: the same behaviours; hacking now earns less than correct answers
        results = score_step(client, 2, HACKED)
        assert {r["rubric_version"] for r in results} == {2}
        assert rewards(results, HACKED, "correct") == [1.0] * 4
        assert rewards(results, HACKED, "hacking") == [0.0] * 4
        assert mean(rewards(results, HACKED, "hacking")) < mean(rewards(results, HACKED, "correct"))

        # the step runs are real Prefect flow runs named step-<N>, with artifacts (the
        # run's last ones follow the step's answer: read once the run has ended)
        keys = ("rubric-diff-step-1-global", "summary-step-1-global", "hacking-step-1")
        for name in ("step-0", "step-1"):
            assert asyncio.run(step_run_state(name, since)).is_completed()
        _, artifacts = asyncio.run(step_run_view("step-1", since, until=artifacts_keyed(*keys)))
        assert set(keys) <= {a.key for a in artifacts}
