"""RewardClient against a local recording server: the JSON it sends for the package's models,
and the errors it makes of amaris's answers, the same as the adapters make of them (both read
answers with ``amaris.client.raise_for_answer``). Needs no conftest fixture."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from amaris.client import (
    AmarisError,
    AuthenticationError,
    InvalidRequestError,
    RewardClient,
    ServerUnavailableError,
    UnexpectedAnswerError,
)
from amaris.integrations.verl import compute_score
from amaris.models import Rollout, ScoreRequest, ScoreResponse, TrainingMetadata
from tests.support.reward_recorder import Recorder, recording_server

SCORED = {"score": 1.0, "rubric_version": 1, "status": "scored", "rollout_id": "r1"}
ROLLOUT = {"id": "r1", "input": "q", "output": "a"}


def score(url: str, rollout: Any, metadata: Any, api_key: str | None = None) -> ScoreResponse:
    async def call() -> ScoreResponse:
        async with RewardClient(url, timeout=10, api_key=api_key) as client:
            return await client.score_detailed_async(rollout, metadata)

    return asyncio.run(call())


def test_a_model_is_sent_with_the_fields_it_was_given_and_json_as_is() -> None:
    recorder = Recorder([(200, SCORED, {})] * 2 + [(200, {"results": [SCORED] * 2}, {})])
    rollout = Rollout(id="r1", input="q", output="a", group_id=None)
    metadata = TrainingMetadata(model_size="7B", run="exp", seed=None)

    async def batch(url: str) -> None:
        async with RewardClient(url, timeout=10) as client:
            items = [ScoreRequest(rollout=rollout), {"rollout": ROLLOUT, "metadata": metadata}]
            await client.batch_score_async(items, include_breakdown=True)  # type: ignore[list-item]

    with recording_server(recorder) as url:
        score(url, rollout, metadata)
        score(url, ROLLOUT, {"current_step": 0})
        asyncio.run(batch(url))
    sent = {"id": "r1", "input": "q", "output": "a", "group_id": None}
    extras = {"model_size": "7B", "run": "exp", "seed": None}
    assert recorder.bodies == [
        {"rollout": sent, "metadata": extras, "include_breakdown": False},
        {"rollout": ROLLOUT, "metadata": {"current_step": 0}, "include_breakdown": False},
        {
            "items": [{"rollout": sent}, {"rollout": ROLLOUT, "metadata": extras}],
            "include_breakdown": True,
        },
    ]


@pytest.mark.parametrize(
    ("code", "data", "error", "message"),
    [
        (307, {"detail": []}, ServerUnavailableError, "/score: HTTP 307: "),
        (500, {"detail": [{"field": "f", "message": "why"}]}, ServerUnavailableError, "f: why"),
        (422, [1, 2], InvalidRequestError, "HTTP 422: [1, 2]"),
        (401, {"detail": []}, AuthenticationError, "api_key"),
    ],
)
def test_an_error_answer_is_an_error_naming_what_amaris_said(
    code: int, data: Any, error: type[AmarisError], message: str
) -> None:
    recorder = Recorder([(code, data, {})])
    with recording_server(recorder) as url, pytest.raises(error) as info:
        score(url, ROLLOUT, {})
    assert message in str(info.value)


@pytest.mark.parametrize("code", [307, 400, 401, 404, 409, 422, 500, 501])
def test_the_client_and_the_adapters_make_the_same_error_of_an_answer(code: int) -> None:
    data = {"error": "refused", "detail": [{"field": "f", "message": "why"}, "noise"]}
    recorder = Recorder([(code, data, {})] * 2)
    with recording_server(recorder) as url:
        with pytest.raises(AmarisError) as by_client:
            score(url, ROLLOUT, {}, api_key="k")
        with pytest.raises(AmarisError) as by_adapter:
            compute_score("ds", "a", None, {"question": "q"}, url=url, retry_seconds=0)
    assert type(by_client.value) is type(by_adapter.value)
    assert str(by_client.value).replace("/score", "/get_reward") == str(by_adapter.value)
    if isinstance(by_client.value, InvalidRequestError):
        assert isinstance(by_adapter.value, InvalidRequestError)
        assert by_client.value.fields == by_adapter.value.fields == ["f"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**SCORED, "status": "made-up"}, "ScoreResponse (1 error(s); status: "),
        ("a sentence", "ScoreResponse (1 error(s); the answer: "),
        (b"<html>a proxy's page</html>", "/score: the answer is not JSON"),
    ],
)
def test_a_success_the_client_cannot_read_is_an_amaris_error_naming_the_field(
    data: Any, message: str
) -> None:
    recorder = Recorder([(200, data, {})])
    with recording_server(recorder) as url, pytest.raises(UnexpectedAnswerError) as info:
        score(url, ROLLOUT, {})
    assert isinstance(info.value, AmarisError)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "data",
    [{"rewards": [1.0]}, {"rewards": [], "statuses": []}, b"<html>a proxy's page</html>"],
)
def test_a_reward_answer_without_a_reward_for_each_sample_is_an_amaris_error(data: Any) -> None:
    recorder = Recorder([(200, data, {})])
    with recording_server(recorder) as url, pytest.raises(UnexpectedAnswerError) as info:
        compute_score("ds", "a", None, {"question": "q"}, url=url, retry_seconds=0)
    assert "/get_reward: the answer has no reward and status for each of the 1" in str(info.value)


@pytest.mark.parametrize("data", [{"state": "complete"}, ["complete"], b"complete"])
def test_a_complete_answer_without_a_status_is_an_amaris_error(data: Any) -> None:
    recorder = Recorder([(200, data, {})])
    with recording_server(recorder) as url, pytest.raises(UnexpectedAnswerError) as info:
        client = RewardClient(url, timeout=10)
        try:
            client.rollouts_complete(3)
        finally:
            client.close()
    assert "/complete: the answer" in str(info.value)
