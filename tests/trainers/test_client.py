"""RewardClient against a real uvicorn server: results and clear exceptions, for requests
given as JSON or as the package's own models (amaris.models)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from amaris import (
    AuthenticationError,
    InvalidRequestError,
    RewardClient,
    RewardUnscoredError,
    ServerUnavailableError,
)
from amaris.client import ServerUnreachableError
from amaris.models import Rollout, ScoreRequest, TrainingMetadata
from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, free_port, serve_in_thread
from tests.support.settings import llm_settings, make_settings

ROLLOUT = {"id": "r1", "input": "What is 2 + 2?", "output": "4.", "supplemental_context": "4"}
META = {"high_level_goal": "math", "model_size": "7B", "current_step": 1, "total_steps": 10}


async def test_score_and_batch(tmp_path: Path) -> None:
    app = in_memory_app(make_settings(tmp_path, **{"server.api_key": "k"}))
    with serve_in_thread(app) as url:
        async with RewardClient(url, timeout=10, api_key="k") as client:
            assert await client.score_async(ROLLOUT, META) == 1.0
            detailed = await client.score_detailed_async(
                {**ROLLOUT, "id": "r1b", "output": "5."}, META, include_breakdown=True
            )
            assert (detailed.score, detailed.rubric_version, detailed.status) == (0.0, 1, "scored")
            assert detailed.breakdown is not None
            assert detailed.breakdown[0].verdict == 0
            results = await client.batch_score_async(
                [
                    {"rollout": ROLLOUT, "metadata": META},
                    {"rollout": {**ROLLOUT, "id": "r2", "output": 7}, "metadata": META},
                ]
            )
            assert [r.status for r in results] == ["scored", "invalid"]
            assert results[1].reason is not None
            assert "items[1].rollout.output" in results[1].reason
            with pytest.raises(InvalidRequestError) as info:
                await client.score_async({"id": "x", "input": "q"}, META)
            assert info.value.status_code == 422
            assert info.value.fields == ["rollout.output"]
            with pytest.raises(InvalidRequestError) as info:  # r1 is in step 1 with "4."
                await client.score_async({**ROLLOUT, "output": "5."}, META)
            assert info.value.status_code == 409
            assert info.value.fields == ["rollout.id"]
        async with RewardClient(url, timeout=10, api_key="wrong") as client:
            with pytest.raises(AuthenticationError):
                await client.score_async(ROLLOUT, META)


async def test_unscored_raises_and_503_is_not_an_outage(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = llm_settings(
        tmp_path, fake_llm, **{"gateway.max_attempts": 1, "scoring.on_failure": "error"}
    )
    with serve_in_thread(in_memory_app(settings)) as url:
        async with RewardClient(url, timeout=10) as client:
            fake_llm.push(Reply(status=500))
            with pytest.raises(RewardUnscoredError) as info:
                await client.score_async(ROLLOUT, META)
            assert info.value.result.status == "unscored"
            assert info.value.result.score is None
            assert "judge_unavailable" in (info.value.result.reason or "")


async def test_unreachable_server() -> None:
    async with RewardClient(f"http://127.0.0.1:{free_port()}", timeout=2) as client:
        with pytest.raises(ServerUnavailableError) as info:
            await client.score_async(ROLLOUT, META)
        assert isinstance(info.value, ServerUnreachableError)
        with pytest.raises(ServerUnreachableError, match=r"^/get_reward: "):
            await asyncio.to_thread(client.get_reward, {"query": ["q"], "prompts": ["p"]})


async def test_the_package_models_are_scored_as_their_json(tmp_path: Path) -> None:
    rollout = Rollout.model_validate(ROLLOUT)
    meta = TrainingMetadata(**META, run="exp-1", seed=None)  # the trainer's own keys too
    with serve_in_thread(in_memory_app(make_settings(tmp_path))) as url:
        async with RewardClient(url, timeout=10) as client:
            assert await client.score_async(rollout, meta) == 1.0
            wrong = rollout.model_copy(update={"id": "r1b", "output": "5."})
            detailed = await client.score_detailed_async(wrong, meta, include_breakdown=True)
            assert (detailed.score, detailed.status, detailed.rollout_id) == (0.0, "scored", "r1b")
            results = await client.batch_score_async(
                [
                    {"rollout": rollout.model_copy(update={"id": "r2"}), "metadata": meta},
                    ScoreRequest(rollout=rollout.model_copy(update={"id": "r3"}), metadata=meta),
                    {"rollout": {**ROLLOUT, "id": "r4"}, "metadata": meta},
                    {"rollout": {**ROLLOUT, "id": "r5", "output": 7}, "metadata": META},
                ]
            )
            assert [r.status for r in results] == ["scored", "scored", "scored", "invalid"]
            assert [r.rollout_id for r in results[:3]] == ["r2", "r3", "r4"]


async def test_a_models_unset_step_is_the_open_step_not_step_zero(tmp_path: Path) -> None:
    # An unset current_step is left out (the server's open step); a dump would send 0.
    first = Rollout.model_validate(ROLLOUT)
    with serve_in_thread(in_memory_app(make_settings(tmp_path))) as url:
        async with RewardClient(url, timeout=10) as client:
            assert await client.score_async(first, TrainingMetadata(current_step=3)) == 1.0
            other = first.model_copy(update={"output": "5."})
            with pytest.raises(InvalidRequestError) as info:  # r1 is in step 3 with "4."
                await client.score_async(other, TrainingMetadata(high_level_goal="math"))
            assert (info.value.status_code, info.value.fields) == (409, ["rollout.id"])


async def test_what_is_neither_a_model_nor_json_is_refused_naming_the_field() -> None:
    rollout = Rollout.model_validate(ROLLOUT)
    item = {"rollout": rollout, "metadata": META}
    # Refused before anything is sent: no server listens there.
    async with RewardClient(f"http://127.0.0.1:{free_port()}", timeout=2) as client:
        with pytest.raises(TypeError) as info:
            await client.score_async(rollout, rollout)  # type: ignore[arg-type]
        assert str(info.value) == (
            "metadata must be an amaris.models.TrainingMetadata or its JSON (a dict), got Rollout"
        )
        with pytest.raises(TypeError, match=r"^rollout must be an amaris\.models\.Rollout or "):
            await client.score_detailed_async(object(), META)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^items\[1\]\.metadata must be .* got Rollout$"):
            await client.batch_score_async([item, {"rollout": ROLLOUT, "metadata": rollout}])  # type: ignore[list-item]
        with pytest.raises(
            TypeError, match=r"^items\[0\] must be an amaris\.models\.ScoreRequest "
        ):
            await client.batch_score_async([rollout])  # type: ignore[list-item]


async def test_get_reward_posts_under_the_step_sync_and_async(tmp_path: Path) -> None:
    body = {"query": ["What is 2 + 2? 4."], "prompts": ["What is 2 + 2? "], "labels": ["4"]}
    app = in_memory_app(make_settings(tmp_path, **{"server.api_key": "k"}))
    with serve_in_thread(app) as url:
        async with RewardClient(url, timeout=10, api_key="k") as client:
            blocking = await asyncio.to_thread(client.get_reward, body, 2)
            assert blocking.status_code == 200
            assert (blocking.json()["step"], blocking.json()["rewards"]) == (2, [1.0])
            answer = await client.get_reward_async({**body, "query": ["What is 2 + 2? 5."]}, 0)
            assert (answer.json()["step"], answer.json()["rewards"]) == (0, [0.0])
        async with RewardClient(url, timeout=10, api_key="wrong") as client:
            assert (await client.get_reward_async(body)).status_code == 401
