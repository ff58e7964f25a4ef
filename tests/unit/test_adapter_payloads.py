"""The trainer side's typed payloads (amaris/integrations, amaris.client) against the
server's models: the adapters cannot import the server (the light client install), so their
TypedDicts spell its fields again, as the client's JSON forms of the request models do;
these tests keep them in step."""

from __future__ import annotations

from typing import Required, get_origin, get_type_hints

from amaris.api.routes.openrlhf import GetRewardRequest, RunMetadata, UnscoredBatchResponse
from amaris.client import MetadataBody, RolloutBody
from amaris.integrations._remote import GetRewardBody, ServerAnswer
from amaris.integrations.verl import RewardKwargs, _run
from amaris.models import Rollout, TrainingMetadata


def test_the_body_sends_fields_the_server_reads() -> None:
    assert set(GetRewardBody.__annotations__) <= set(GetRewardRequest.model_fields)


def test_the_clients_json_forms_spell_the_request_models() -> None:
    # RewardClient takes the models or their JSON: a field of one is a key of the other.
    for body, model in ((RolloutBody, Rollout), (MetadataBody, TrainingMetadata)):
        hints = get_type_hints(body, include_extras=True)
        assert list(hints) == list(model.model_fields)
        required = {name for name, info in model.model_fields.items() if info.is_required()}
        assert {name for name, hint in hints.items() if get_origin(hint) is Required} == required


def test_the_answer_reads_fields_the_server_writes() -> None:
    # UnscoredBatchResponse is GetRewardResponse with the 503's detail.
    assert set(ServerAnswer.__annotations__) <= set(UnscoredBatchResponse.model_fields)


def test_verl_passes_the_whole_run_description_in_its_order() -> None:
    # reward_kwargs' run fields go to /get_reward as amaris_metadata: a field added to
    # RunMetadata must be read from reward_kwargs too.
    fields = list(RunMetadata.model_fields)
    assert set(fields) <= set(RewardKwargs.__annotations__)
    kwargs: RewardKwargs = {
        "model_size": "7B",
        "total_steps": 10,
        "url": "http://x",
        "high_level_goal": "g",
        "other_context": "c",
    }
    run = _run(kwargs)
    assert run == {
        "high_level_goal": "g",
        "model_size": "7B",
        "total_steps": 10,
        "other_context": "c",
    }
    assert list(run) == fields
    assert _run({"url": "http://x"}) is None
