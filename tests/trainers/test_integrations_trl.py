"""TRL: the GRPO reward function called as ``GRPOTrainer`` calls it, over real HTTP."""

from __future__ import annotations

import asyncio
import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from amaris.integrations.text import completion_text, render
from amaris.integrations.trl import amaris_reward_func, amaris_reward_funcs
from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, serve_in_thread
from tests.support.settings import llm_settings


@dataclass
class TrainerState:
    """The field of transformers' TrainerState the reward function reads."""

    global_step: int


def test_conversational_batch_with_logging(offline_server: tuple[str, Any]) -> None:
    url, services = offline_server
    func = amaris_reward_func(url, high_level_goal="math", total_steps=100)
    assert func.__name__ == "amaris"
    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 6 * 7?"},
    ]
    completions = [
        [{"role": "assistant", "content": "The answer is 42."}],
        [{"role": "assistant", "content": "The answer is 40."}],
    ]
    extra: dict[str, list[Any]] = {}
    metrics: dict[str, float] = {}
    rewards = asyncio.run(
        func(
            prompts=[prompt, prompt],
            completions=completions,
            completion_ids=[[1, 2], [3, 4]],
            answer=["42", "42"],
            prompt_id=["q7", "q7"],
            trainer_state=TrainerState(global_step=21),
            log_extra=lambda column, values: extra.__setitem__(column, values),
            log_metric=lambda name, value: metrics.__setitem__(name, value),
        )
    )
    assert rewards == [1.0, 0.0]
    assert extra == {"amaris_status": ["scored", "scored"], "amaris_rubric_version": [1, 1]}
    assert metrics == {"amaris/unscored": 0.0, "amaris/rubric_version": 1.0}
    records = services.rollouts.load_step(21)
    assert [r.rollout.output for r in records] == ["The answer is 42.", "The answer is 40."]
    assert {r.rollout.group_id for r in records} == {"q7"}
    assert records[0].rollout.input == "system: Be brief.\nuser: What is 6 * 7?"
    assert records[0].metadata["total_steps"] == 100


def test_plain_strings_group_by_prompt(offline_server: tuple[str, Any]) -> None:
    url, services = offline_server
    func = amaris_reward_func(url, name="judge", reference_column="solution")
    assert func.__name__ == "judge"
    rewards = asyncio.run(
        func(
            ["What is 3 * 9? ", "What is 3 * 9? "],
            ["27", "It is 26."],
            solution=["27", "27"],
            trainer_state=TrainerState(global_step=22),
        )
    )
    assert rewards == [1.0, 0.0]
    records = services.rollouts.load_step(22)
    # No group id sent: the group is the prompt (a rollout's input when it has no group id).
    assert {r.rollout.group_id for r in records} == {None}
    assert {r.rollout.input for r in records} == {"What is 3 * 9? "}


def test_the_reward_functions_per_key_share_one_call(offline_server: tuple[str, Any]) -> None:
    url, services = offline_server
    funcs = amaris_reward_funcs(url, anchor_ids=["A1"])

    async def batch() -> list[list[float | None]]:
        # every function on the batch, concurrently, as GRPOTrainer runs async ones
        calls = [
            f(
                ["What is 5 * 5? ", "What is 5 * 5? "],
                ["25", "It is 24."],
                answer=["25", "25"],
                trainer_state=TrainerState(global_step=23),
            )
            for f in funcs
        ]
        return list(await asyncio.gather(*calls))

    scalar, anchors, adaptive, a1 = asyncio.run(batch())
    # the one anchor makes the whole reward; no adaptive criteria yet
    assert scalar == anchors == a1 == [1.0, 0.0]
    assert adaptive == [None, None]
    assert len(services.rollouts.load_step(23)) == 2  # one rollout per sample


def test_the_example_drives_the_text_and_agent_paths(
    offline_server: tuple[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    url, services = offline_server
    monkeypatch.setenv("AMARIS_URL", url)
    runpy.run_path(str(Path(__file__).parents[2] / "examples/trl/drive.py"))
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("amaris [1.0, 0.0] {'amaris_status': ['scored', 'scored']")
    assert printed[1:] == [
        "amaris [1.0, 0.0]",
        "amaris_anchors [1.0, 0.0]",
        "amaris_adaptive [None, None]",
        "amaris_A1 [1.0, 0.0]",
    ]
    episodes = [r for r in services.rollouts.load_step(0) if r.rollout.group_id == "q1"]
    assert sorted(str(r.rollout.outcome) for r in episodes) == [
        "{'calculator_calls': 0}",
        "{'calculator_calls': 1}",
    ]


def test_unscored_sample_is_none(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(*[Reply(status=500)] * 200)
    settings = llm_settings(
        tmp_path, fake_llm, **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 0}
    )
    app = in_memory_app(settings)
    metrics: dict[str, float] = {}
    with serve_in_thread(app) as url:
        func = amaris_reward_func(url, retry_seconds=0.2)
        rewards = asyncio.run(
            func(
                ["What is 2+2?"],
                ["4"],
                answer=["4"],
                trainer_state=TrainerState(global_step=1),
                log_metric=lambda n, v: metrics.__setitem__(n, v),
            )
        )
        # an agent batch too: each key of the episode None, nothing made up
        funcs = amaris_reward_funcs(url, retry_seconds=0.2, trajectories=True)
        episode = [{"role": "assistant", "content": "4"}]

        async def batch() -> list[list[float | None]]:
            return list(
                await asyncio.gather(*(f(["What is 2+2?"], [episode], answer=["4"]) for f in funcs))
            )

        keys = asyncio.run(batch())
    assert rewards == [None]
    assert metrics["amaris/unscored"] == 1.0
    assert keys == [[None], [None], [None]]


def test_tool_calls_are_judged_as_text() -> None:
    call = {"type": "function", "function": {"name": "multiply", "arguments": '{"a": 6}'}}
    completion = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "name": "multiply", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
    ]
    assert completion_text(completion) == (
        'tool call: multiply({"a": 6})\ntool result: 42\nIt is 42.'
    )
    # in a prompt's history: role labels, the call after the message's own text
    history = [{"role": "assistant", "content": "Let me compute.", "tool_calls": [call]}]
    assert render(history) == 'assistant: Let me compute.\ntool call: multiply({"a": 6})'
