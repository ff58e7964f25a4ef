"""``POST /audit/ack`` lifts the pause a fidelity alarm put on scoring;
the pause is read from the data folder on each request (another process may write it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amaris.trust.audit.pause import AuditPause
from tests.support.app import serve
from tests.support.settings import make_settings


def body(rollout_id: str) -> dict[str, Any]:
    return {
        "rollout": {"id": rollout_id, "input": "What is 6 * 7?", "output": "42"},
        "metadata": {"current_step": 0},
    }


def test_ack_over_http_resumes_scoring(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with serve(settings) as client:
        assert client.post("/score", json=body("r0")).status_code == 200
        # The step path (here: another process) pauses scoring.
        AuditPause(settings.memory.path).pause(4, "the auditor keeps 0% of the top tail")
        refused = client.post("/score", json=body("r1"))
        openrlhf = client.post(
            "/get_reward", json={"query": ["q 42"], "prompts": ["q"], "labels": ["42"]}
        )
        bad = client.post("/audit/ack", json={"now": True})
        still = client.post("/score", json=body("r1")).status_code
        acked = client.post("/audit/ack", json={})
        resumed = client.post("/score", json=body("r1"))
        again = client.post("/audit/ack", json={})
    assert refused.status_code == 503
    assert refused.headers["Retry-After"]
    assert refused.json()["error"] == "scoring_paused"
    assert "step 4: the auditor keeps 0% of the top tail" in refused.json()["detail"][0]["message"]
    assert openrlhf.status_code == 503 and openrlhf.json()["error"] == "scoring_paused"
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "now"
    assert still == 503  # a refused ack changes nothing
    assert acked.status_code == 200
    assert acked.json()["status"] == "resumed"
    assert acked.json()["acknowledged"]["step"] == 4
    assert resumed.status_code == 200 and resumed.json()["status"] == "scored"
    assert again.json() == {"status": "not_paused", "acknowledged": None}
