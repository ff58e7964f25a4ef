"""Group-aware analysis: ``group_id`` is logged and decides which rollouts are compared."""

from __future__ import annotations

from typing import Any

from amaris.offline.agents import handle_analyzer
from flows.scope_facts import group_peers as _group_peers
from tests.support.testclient import TestClient


def item(rid: str, question: str, output: str, group: str | None) -> dict[str, Any]:
    rollout = {
        "id": rid,
        "input": question,
        "output": output,
        "supplemental_context": "42",
        **({"group_id": group} if group else {}),
    }
    return {"rollout": rollout, "metadata": {"current_step": 6, "total_steps": 10}}


def test_group_id_not_input_decides_the_peers(offline_client: TestClient) -> None:
    items = [
        # one prompt id, written two ways (a paraphrase): one group
        item("a", "What is 6 * 7?", "The answer is 42.", "p1"),
        item("b", "Compute six times seven.", "The answer is 40.", "p1"),
        # the same text as "a" but another prompt id: not compared with "a"
        item("c", "What is 6 * 7?", "The answer is 42 or 40.", "p2"),
        # no group id: grouped by input
        item("d", "What is 1 + 1?", "2", None),
        item("e", "What is 1 + 1?", "3", None),
    ]
    r = offline_client.post("/batch_score", json={"items": items})
    assert [x["status"] for x in r.json()["results"]] == ["scored"] * 5
    records = offline_client.app.state.services.rollouts.load_step(6)  # type: ignore[attr-defined]
    assert [rec.rollout.group_id for rec in records] == ["p1", "p1", "p2", None, None]

    peers = {rec.rollout.id: _group_peers(records)[rec.seq] for rec in records}
    assert {k: [p.id for p in v] for k, v in peers.items()} == {
        "a": ["b"],
        "b": ["a"],
        "c": [],
        "d": ["e"],
        "e": ["d"],
    }
    assert [p.model_dump() for p in peers["a"]] == [
        {"id": "b", "output": "The answer is 40.", "score": 0.0}
    ]

    # the analyzer compares a rollout with its group: here "a" scored above its peer
    by_id = {rec.rollout.id: rec.to_json() for rec in records}
    analysis = handle_analyzer(
        {
            "rollout": by_id["a"]["rollout"],
            "metadata": by_id["a"]["metadata"],
            "score": by_id["a"]["score"],
            "verdicts": by_id["a"]["verdicts"],
            "criteria": [
                {
                    "id": "A1",
                    "text": "The response gives the correct final answer.",
                    "weight": 1.0,
                    "kind": "requirement",
                    "is_anchor": True,
                }
            ],
            "group": [p.model_dump(mode="json") for p in peers["a"]],
        }
    ).model_dump(mode="json")
    assert [o["observation"] for o in analysis["other_observations"]] == [
        "Score 1.00 is above the mean 0.00 of 1 other scored responses to the same prompt."
    ]
    alone = handle_analyzer(
        {
            "rollout": by_id["c"]["rollout"],
            "metadata": {},
            "score": by_id["c"]["score"],
            "verdicts": [],
            "criteria": [],
            "group": peers["c"],
        }
    ).model_dump(mode="json")
    assert alone["other_observations"] == []


def test_group_id_is_validated(offline_client: TestClient) -> None:
    body = item("a", "q", "o", None)
    body["rollout"]["group_id"] = ""
    r = offline_client.post("/score", json=body)
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "rollout.group_id"
