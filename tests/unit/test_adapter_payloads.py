"""The trainer adapters' typed payloads (amaris/integrations) against the server's models:
the adapters cannot import the server (the light client install), so their TypedDicts
spell its fields again; these tests keep the two in step."""

from __future__ import annotations

from amaris.api.routes.openrlhf import GetRewardRequest, RunMetadata, UnscoredBatchResponse
from amaris.integrations._remote import GetRewardBody, ServerAnswer
from amaris.integrations.verl import RewardKwargs, _run


def test_the_body_sends_fields_the_server_reads() -> None:
    assert set(GetRewardBody.__annotations__) <= set(GetRewardRequest.model_fields)


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
