"""The simulator sends its planned rollouts through the client's typed ``/batch_score``
items (amaris.client.ScoreItem): the same JSON, key for key and in order, as the planned
models' own dumps (the rollout without its None fields, the metadata
with its set fields only)."""

from __future__ import annotations

import json

import pytest

from amaris.models import Rollout, TrainingMetadata
from amaris.sim.driver import _score_item
from amaris.sim.policy import PlannedRollout

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


@pytest.mark.parametrize("rollout", ROLLOUTS)
@pytest.mark.parametrize("metadata", METADATA)
def test_a_score_item_is_the_planned_models_json(
    rollout: Rollout, metadata: TrainingMetadata
) -> None:
    item = _score_item(PlannedRollout(rollout, metadata, "honest"))
    dumped = {
        "rollout": rollout.model_dump(mode="json", exclude_none=True),
        "metadata": metadata.model_dump(mode="json", exclude_unset=True),
    }
    assert json.dumps(item, ensure_ascii=False) == json.dumps(dumped, ensure_ascii=False)
