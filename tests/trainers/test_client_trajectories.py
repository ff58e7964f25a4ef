"""An agent's trajectory scored through :class:`RewardClient` against a real uvicorn server:
given as a :class:`~amaris.models.Rollout`, as its JSON, or in a ``/batch_score`` item; the
server judges the whole episode and logs the messages, the outcome and the finish reason;
an invalid trajectory is refused naming its field. The judge is a scripted provider at the
gateway seam (tests/support/scripted_llm.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from amaris import RewardClient
from amaris.client import InvalidRequestError, MessageBody, MetadataBody, RolloutBody, ScoreItem
from amaris.llm.gateway import build_providers
from amaris.llm.providers import Completion
from amaris.models import Rollout, ScoreRequest, TrainingMetadata
from amaris.trajectory import FinishReason
from tests.support.app import in_memory_app
from tests.support.fake_llm import serve_in_thread
from tests.support.scripted_llm import Call, ScriptedProvider, verdicts
from tests.support.settings import make_settings

MESSAGES: list[MessageBody] = [
    {"role": "user", "content": "Which file defines the parser?"},
    {
        "role": "assistant",
        "content": "Let me search.",
        "tool_calls": [
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "grep", "arguments": '{"pattern": "def parse"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_7", "content": "src/parser.py:12: def parse("},
    {"role": "assistant", "content": "src/parser.py defines it."},
]
OUTCOME = {"file_found": True, "env_reward": 1.0}
META: MetadataBody = {"current_step": 1}


def judge(call: Call) -> Completion:
    """Every criterion 4 when the judge sees the tool's result, else 0."""
    good = "src/parser.py:12" in json.dumps(call.rollout())
    return verdicts(*((c["id"], 4 if good else 0) for c in call.criteria()))


def rollout(rid: str, finish_reason: FinishReason = "stop") -> RolloutBody:
    return {
        "id": rid,
        "messages": copy.deepcopy(MESSAGES),
        "outcome": OUTCOME,
        "finish_reason": finish_reason,
    }


async def test_the_client_scores_a_trajectory_as_a_model_or_as_json(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    provider = ScriptedProvider(default=judge)
    app = in_memory_app(settings, providers={**build_providers(settings), "scorer": provider})
    model = Rollout.model_validate(rollout("m1"))
    as_request = ScoreRequest(rollout=Rollout.model_validate(rollout("b1")), metadata=META)
    wrong_args: Any = rollout("b3")  # JSON a trainer got wrong: arguments parsed
    wrong_args["messages"][1]["tool_calls"][0]["function"]["arguments"] = {"pattern": "x"}
    with_output: Any = {**rollout("j2"), "output": "x"}
    with serve_in_thread(app) as url:
        async with RewardClient(url, timeout=10) as client:
            detailed = await client.score_detailed_async(model, TrainingMetadata(current_step=1))
            score = await client.score_async(rollout("j1", finish_reason="tool_limit"), META)
            results = await client.batch_score_async(
                [
                    as_request,
                    ScoreItem(rollout=rollout("b2"), metadata=META),
                    ScoreItem(rollout=wrong_args, metadata=META),
                ]
            )
            with pytest.raises(InvalidRequestError) as refused:
                await client.score_async(with_output, META)
        records = app.state.services.rollouts.load_step(1)
    assert (detailed.status, detailed.score) == ("scored", 1.0)
    assert detailed.rewards == {"anchors": 1.0, "adaptive": None, "A1": 1.0}
    assert score == 1.0
    assert [r.status for r in results] == ["scored", "scored", "invalid"]
    assert [r.rewards for r in results[:2]] == [detailed.rewards] * 2
    assert results[2].reason is not None
    assert results[2].reason.startswith(
        "items[2].rollout.messages[1].tool_calls[0].function.arguments: "
    )
    assert (refused.value.status_code, refused.value.fields) == (422, ["rollout.output"])
    # The judge read each whole episode: the call, its result, the outcome, why it ended.
    # (m1, b1 and b2 are one episode: judged once, the batch answered from the score cache.)
    assert len(provider.calls) == 2
    for call in provider.calls:
        seen = json.dumps(call.rollout())
        for evidence in ("call_7", "grep", "file_found"):
            assert evidence in seen, evidence
    assert "tool_limit" in json.dumps(provider.calls[1].rollout())
    # The log keeps the trajectory as sent, whichever form the client was given.
    stored = {rec.rollout.id: rec.to_json()["rollout"] for rec in records}
    assert sorted(stored) == ["b1", "b2", "j1", "m1"]
    for rid, sent in stored.items():
        assert sent["messages"] == MESSAGES, rid
        assert sent["outcome"] == OUTCOME
    assert (stored["m1"]["finish_reason"], stored["j1"]["finish_reason"]) == ("stop", "tool_limit")
    assert Rollout.model_validate(stored["m1"]) == model
