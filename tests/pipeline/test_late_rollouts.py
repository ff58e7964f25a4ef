"""No silent corner for a rollout: one for a step completed already says it is late in its
answer and is counted; one without a step goes to the open step; completing a finished step
again says it changed nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.app import serve
from tests.support.pipeline_helpers import metadata, rollout
from tests.support.settings import make_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")


def scored(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/score", json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    assert result["status"] == "scored", result
    return result


def late_total(client: Any) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("amaris_rollouts_late_total "):
            return float(line.split()[1])
    raise AssertionError("no amaris_rollouts_late_total in /metrics")


def test_a_late_rollout_says_so_and_a_rollout_without_a_step_goes_to_the_open_one(
    tmp_path: Path,
) -> None:
    with serve(make_settings(tmp_path)) as client:
        first = scored(client, {"rollout": rollout(0, 0, "correct"), "metadata": metadata(0)})
        assert first["late"] is False
        assert client.post("/complete", json={"step": 0}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 0, "timeout": 120}).json()
        assert done["status"] in ("updated", "unchanged"), done
        # the same step again: logged, not analysed, and the answer and a metric say so
        again = scored(client, {"rollout": rollout(0, 1, "correct"), "metadata": metadata(0)})
        assert again["late"] is True
        assert late_total(client) == 1.0
        # a second /complete of the finished step changes nothing, and says so
        noop = client.post("/complete", json={"step": 0}).json()
        assert noop == {"status": "noop", "reason": "step 0 is done already: nothing changed"}
        # no metadata (or no current_step): the open step, the one after step 0
        bare = scored(client, {"rollout": rollout(1, 2, "correct")})
        goal = {"rollout": rollout(1, 3, "correct"), "metadata": {"high_level_goal": "math"}}
        told = scored(client, goal)
        assert bare["late"] is False and told["late"] is False
        assert late_total(client) == 1.0
        logged = client.get("/steps/1/rollouts").json()
        ids = {r["rollout"]["id"] for r in logged["records"]}
        assert ids == {"s1-r2-correct", "s1-r3-correct"}
        assert {r["metadata"]["current_step"] for r in logged["records"]} == {1}
        assert not any(r["late"] for r in logged["records"])
