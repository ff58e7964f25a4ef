"""The simulator scores its planned rollouts as the package's request models
(amaris.models.ScoreRequest), which RewardClient sends with the fields they were given: on
the wire, key for key and in order, the rollout's JSON without its None fields (the policy
sets none) and the metadata's set fields; a replay sends a trainer's own metadata keys
again."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from amaris.cli.replay import ReplaySource
from amaris.client import RewardClient
from amaris.models import Rollout, ScoreRequest, TrainingMetadata
from amaris.sim.driver import _score_item
from amaris.sim.policy import PlannedRollout
from amaris.sim.records import RecordedRollout
from tests.support.reward_recorder import Recorder, recording_server

ROLLOUTS = [
    Rollout(
        id="s1-r000",
        input="2+2?",
        output="4 «é»",
        supplemental_context="4",
        metadata={"sim_behaviour": "honest", "nested": [1, {"a": None}]},
    ),
    Rollout(id="s1-r001", input="q", output="a", group_id="g1"),
]
METADATA = [
    TrainingMetadata(
        high_level_goal="math", model_size="simulated", current_step=3, total_steps=None
    ),
    TrainingMetadata(other_context="ctx"),
    TrainingMetadata(),
]
SCORED = {"score": 1.0, "rubric_version": 1, "status": "scored"}


def sent_items(items: list[ScoreRequest]) -> list[Any]:
    """The ``/batch_score`` items the server receives for ``items``."""
    recorder = Recorder([(200, {"results": [SCORED] * len(items)}, {})])

    async def send(url: str) -> None:
        async with RewardClient(url, timeout=10) as client:
            await client.batch_score_async(items)

    with recording_server(recorder) as url:
        asyncio.run(send(url))
    [body] = recorder.bodies
    return list(body["items"])


@pytest.mark.parametrize("rollout", ROLLOUTS)
@pytest.mark.parametrize("metadata", METADATA)
def test_a_score_item_is_the_planned_models_json(
    rollout: Rollout, metadata: TrainingMetadata
) -> None:
    [item] = sent_items([_score_item(PlannedRollout(rollout, metadata, "honest"))])
    dumped = {
        "rollout": rollout.model_dump(mode="json", exclude_none=True),
        "metadata": metadata.model_dump(mode="json", exclude_unset=True),
    }
    assert json.dumps(item, ensure_ascii=False) == json.dumps(dumped, ensure_ascii=False)


def test_a_replay_sends_the_trainers_own_metadata_keys_again() -> None:
    recorded = {"high_level_goal": "math", "run": "exp-1", "seed": None, "current_step": 0}
    record = RecordedRollout(step=2, rollout=ROLLOUTS[1], metadata=recorded)
    [planned] = ReplaySource([record]).rollouts(2, {})  # type: ignore[typeddict-item]
    [item] = sent_items([_score_item(planned)])
    assert item["metadata"] == {
        "high_level_goal": "math",
        "current_step": 2,
        "run": "exp-1",
        "seed": None,
    }
    assert item["rollout"] == {"id": "s1-r001", "input": "q", "output": "a", "group_id": "g1"}
