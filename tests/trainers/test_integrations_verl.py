"""verl: ``compute_score`` / ``compute_score_async`` called as verl calls them, over real HTTP."""

from __future__ import annotations

import ast
import asyncio
import runpy
from pathlib import Path
from typing import Any

import pytest

from amaris.client import InvalidRequestError, RewardUnavailableError
from amaris.integrations.verl import compute_score, compute_score_async
from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, serve_in_thread
from tests.support.settings import llm_settings, make_settings

QUESTION = "What is 6 * 7?"


def extra(index: int, **more: Any) -> dict[str, Any]:
    """extra_info as the verl gsm8k preprocessing writes it, plus the prompt."""
    return {"split": "train", "index": index, "question": QUESTION, **more}


def test_compute_score_returns_score_version_status(offline_server: tuple[str, Any]) -> None:
    url, services = offline_server
    reward_kwargs = {"url": url, "step": 11, "high_level_goal": "math", "anchor_ids": ["A1"]}
    good = compute_score(
        "openai/gsm8k", "6 * 7 = 42. The answer is 42.", "42", extra(3), **reward_kwargs
    )
    bad = compute_score(
        data_source="openai/gsm8k",
        solution_str="The answer is 41.",
        ground_truth="42",
        extra_info=extra(3),
        **reward_kwargs,
    )
    scored = {"rubric_version": 1, "status": "scored", "reason": "", "unscored": 0.0}
    # the reward vector: the rubric's one anchor, and no adaptive criterion yet
    assert good == {"score": 1.0, **scored, "anchors": 1.0, "adaptive": None, "A1": 1.0}
    assert bad == {"score": 0.0, **scored, "anchors": 0.0, "adaptive": None, "A1": 0.0}
    records = services.rollouts.load_step(11)
    assert [r.rollout.group_id for r in records] == ["openai/gsm8k/3"] * 2
    assert [r.rollout.input for r in records] == [QUESTION] * 2
    assert records[0].metadata["high_level_goal"] == "math"


def test_async_variant_with_chat_prompt_and_reward_loop_kwargs(
    offline_server: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, services = offline_server
    monkeypatch.setenv("AMARIS_URL", url)
    info = {"prompt": [{"role": "user", "content": QUESTION}], "uid": "u-1", "global_steps": 12}

    async def batch() -> list[dict[str, Any]]:
        # verl's reward loop awaits many samples at once and adds its own kwargs
        return list(
            await asyncio.gather(
                *(
                    compute_score_async(
                        data_source="gsm8k",
                        solution_str=s,
                        ground_truth="42",
                        extra_info=info,
                        reward_router_address=None,
                        reward_model_tokenizer=None,
                    )
                    for s in ("The answer is 42.", "The answer is 7.", "It is 42 or 43.")
                )
            )
        )

    results = asyncio.run(batch())
    assert [r["score"] for r in results] == [1.0, 0.0, 1.0]
    assert {r["status"] for r in results} == {"scored"}
    records = services.rollouts.load_step(12)
    assert {r.rollout.group_id for r in records} == {"u-1"}
    assert {r.rollout.input for r in records} == {f"user: {QUESTION}"}


def test_step_from_environment(
    offline_server: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, services = offline_server
    monkeypatch.setenv("AMARIS_STEP", "13")
    compute_score("gsm8k", "The answer is 42.", "42", extra(1), url=url)
    assert services.rollouts.count(13) == 1


def test_step_zero_is_sent_as_step_zero(tmp_path: Path) -> None:
    # Step 0 is a step like any other: with step 4 open, a rollout of step 0 is logged
    # under 0, not under the step the server would pick for a request that names none.
    app = in_memory_app(make_settings(tmp_path))
    with serve_in_thread(app) as url:
        services = app.state.services
        compute_score("gsm8k", "The answer is 42.", "42", extra(1), url=url, step=4)
        compute_score("gsm8k", "The answer is 42.", "42", extra(2), url=url, step=0)
        extra_info = extra(3, global_steps=0)
        compute_score("gsm8k", "The answer is 42.", "42", extra_info, url=url)
        assert (services.rollouts.count(0), services.rollouts.count(4)) == (2, 1)


def test_missing_prompt_is_a_clear_error(offline_server: tuple[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"extra_info\['prompt'\].*AmarisRewardManager"):
        compute_score("gsm8k", "42", "42", {"index": 0}, url=offline_server[0])


def test_unscored_is_retried_then_raises_or_uses_unscored_score(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = llm_settings(
        tmp_path, fake_llm, **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 0}
    )
    app = in_memory_app(settings)
    with serve_in_thread(app) as url:
        kwargs = {"url": url, "step": 2, "retry_seconds": 0.3}
        # a judge failure, then a verdict: the retry gets the reward (a budget that a loaded
        # machine cannot use up before the retry)
        fake_llm.push(Reply(status=500))
        assert compute_score(
            "gsm8k", "The answer is 42.", "42", extra(0), **{**kwargs, "retry_seconds": 60}
        ) == {
            "score": 1.0,
            "rubric_version": 1,
            "status": "scored",
            "reason": "",
            "unscored": 0.0,
            "anchors": 1.0,
            "adaptive": None,
        }
        # the judge keeps failing: an error by default, never 0
        fake_llm.push(*[Reply(status=500)] * 200)
        with pytest.raises(RewardUnavailableError, match="judge_unavailable"):
            compute_score("gsm8k", "The answer is 41.", "42", extra(0), **kwargs)
        # an explicit unscored_score is returned, marked unscored for verl's logs
        fallback = compute_score(
            "gsm8k", "The answer is 41.", "42", extra(0), unscored_score=-1.0, **kwargs
        )
    assert fallback.pop("reason").startswith("1 of 1 samples unscored (sample 0: judge_unavailable")
    # no criterion judged: the vector's keys hold the stand-in too
    unscored = {"status": "unscored", "unscored": 1.0, "anchors": -1.0, "adaptive": -1.0}
    assert fallback == {"score": -1.0, "rubric_version": 1, **unscored}
    # amaris unreachable: the same keys, status "error"
    down = compute_score(
        "gsm8k", "42", "42", extra(0), url="http://127.0.0.1:9", retry_seconds=0, unscored_score=0.5
    )
    assert down.pop("reason").startswith("amaris unreachable at http://127.0.0.1:9")
    assert down == {
        "score": 0.5,
        "rubric_version": 0,
        "status": "error",
        "unscored": 1.0,
        "anchors": 0.5,
        "adaptive": 0.5,
    }


def test_an_episode_is_logged_as_a_trajectory_and_a_wrong_one_is_refused(
    offline_server: tuple[str, Any],
) -> None:
    url, services = offline_server
    chat = [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "mul"}}]},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "The answer is 42."},
    ]
    info = extra(5, extras={"messages": chat, "finish_reason": "stop"}, num_turns=4)
    result = compute_score("openai/gsm8k", "-", "42", info, url=url, step=21, anchor_ids="A1")
    assert [result[k] for k in ("score", "status", "anchors", "A1")] == [1.0, "scored", 1.0, 1.0]
    (record,) = services.rollouts.load_step(21)
    assert record.rollout.input == QUESTION and record.rollout.group_id == "openai/gsm8k/5"
    assert (record.rollout.model_extra or {})["finish_reason"] == "stop"
    assert record.rollout.output.endswith("[3] assistant: The answer is 42.\nfinish reason: stop")
    # a finish reason amaris does not know: refused, naming the field, never a reward
    info["extras"] = {"messages": chat, "finish_reason": "aborted"}
    with pytest.raises(InvalidRequestError) as refused:
        compute_score("openai/gsm8k", "-", "42", info, url=url, step=21, unscored_score=0.0)
    assert refused.value.fields == ["items[0].rollout.finish_reason"]
    assert services.rollouts.count(21) == 1


def test_the_example_drives_the_text_and_agent_paths(
    offline_server: tuple[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    url, services = offline_server
    monkeypatch.setenv("AMARIS_URL", url)
    monkeypatch.setenv("AMARIS_STEP", "31")
    runpy.run_path(str(Path(__file__).parents[2] / "examples/verl/drive.py"))
    printed = [ast.literal_eval(line) for line in capsys.readouterr().out.splitlines()]
    scores = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]  # two texts, two texts in the loop, two episodes
    assert [p["score"] for p in printed] == [p["A1"] for p in printed] == scores
    assert {(p["status"], p["adaptive"]) for p in printed} == {("scored", None)}
    episodes = [
        r.rollout for r in services.rollouts.load_step(31) if r.rollout.group_id.endswith("/1")
    ]
    assert len(episodes) == 2
    assert all(
        e.output.startswith("[1] assistant: \n    call call_1_0: multiply(") for e in episodes
    )
