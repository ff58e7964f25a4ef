"""Body builders for HTTP tests of ``/score``: bodies, scripted judge replies, counters."""

from __future__ import annotations

import json
from typing import Any

from amaris.agents.prompts import read_data
from amaris.sim.judge_server import Reply
from tests.support.testclient import TestClient

NOOP = {
    "status": "noop",
    "reason": "steps complete by themselves (pipeline.rollouts_per_step is set)",
}
"""``POST /complete``'s answer when steps complete by themselves."""


def body(output: str = "4", **rollout: Any) -> dict[str, Any]:
    """A minimal /score body; keyword arguments override rollout fields."""
    fields: dict[str, Any] = {
        "id": "r1",
        "input": "What is 2+2?",
        "output": output,
        "supplemental_context": "4",
        **rollout,
    }
    return {"rollout": fields}


def verdicts(**scores: int) -> Reply:
    """A judge reply with one verdict per keyword (criterion id -> score)."""
    items = [{"id": cid, "score": s, "reason": f"{cid} looks {s}"} for cid, s in scores.items()]
    return Reply(content=json.dumps({"verdicts": items}))


def judge_data(request: dict[str, Any]) -> dict[str, Any]:
    """The data of a recorded judge request (its blocks merged: criteria and rollout)."""
    return read_data(request["messages"])


def counters(client: TestClient) -> dict[str, int]:
    result: dict[str, int] = client.get("/healthz").json()["counters"]
    return result
