"""TRL's agent path and multi-reward GRPO (``amaris.integrations.trl``) against a recording
server: tool-calling conversations sent as ``rollout.messages`` to ``/batch_score``, the
reward functions of ``amaris_reward_funcs`` sharing one call per batch, each reading its
key. Needs no conftest fixture; tests/trainers/test_contract_trl.py runs TRL's own trainer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from amaris.client import InvalidRequestError
from amaris.integrations.trl import amaris_reward_func, amaris_reward_funcs
from tests.support.reward_recorder import Recorder, recording_server, reward_answer

PROMPT = [{"role": "user", "content": "What is 6 * 7? Use the calculator."}]
# TRL's form: arguments parsed into a dict, no call id, the tool's answer without
# tool_call_id (its ``name`` instead).
CALL = {"type": "function", "function": {"name": "multiply", "arguments": {"a": 6, "b": 7}}}
EPISODE = [
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "name": "multiply", "content": "42"},
    {"role": "assistant", "content": "The answer is 42."},
]
SENT_EPISODE = [
    {"role": "user", "content": "What is 6 * 7? Use the calculator."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1_0",
                "type": "function",
                "function": {"name": "multiply", "arguments": '{"a": 6, "b": 7}'},
            }
        ],
    },
    {"role": "tool", "content": "42", "tool_call_id": "call_1_0"},
    {"role": "assistant", "content": "The answer is 42."},
]
PLAIN = [{"role": "assistant", "content": "It is 41."}]
VECTORS = [
    {"anchors": 0.75, "adaptive": None, "A1": 1.0, "A2": 0.5},
    {"anchors": 0.25, "adaptive": None, "A1": 0.0, "A2": 0.5},
]


@dataclass
class TrainerState:
    global_step: int


@dataclass
class Environment:
    """What an ``environment_factory`` instance holds after its episode."""

    solved: bool


def scored(score: float | None, vector: dict[str, float | None] | None, **fields: Any) -> Any:
    """One ``/batch_score`` result."""
    status = "scored" if vector is not None else "unscored"
    return {"score": score, "rubric_version": 3, "status": status, "rewards": vector} | fields


def batch_answer(*results: Any) -> tuple[int, Any, dict[str, str]]:
    return 200, {"results": list(results)}, {}


async def gather(
    funcs: list[Any], prompts: list[Any], completions: list[Any], **kwargs: Any
) -> Any:
    """Every reward function on one batch, concurrently, as ``GRPOTrainer`` runs async ones."""
    return await asyncio.gather(*(f(prompts, completions, **kwargs) for f in funcs))


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AMARIS_URL", "AMARIS_API_KEY", "AMARIS_STEP"):
        monkeypatch.delenv(name, raising=False)


def test_a_tool_calling_batch_goes_as_messages_with_columns_step_run_and_outcome() -> None:
    recorder = Recorder([batch_answer(scored(1.0, VECTORS[0]), scored(0.0, VECTORS[1]))])
    extra: dict[str, list[Any]] = {}
    metrics: dict[str, float] = {}
    with recording_server(recorder) as url:
        func = amaris_reward_func(
            url,
            api_key="k",
            high_level_goal="math",
            total_steps=100,
            outcome=lambda env: {"solved": env.solved},
        )
        rewards = asyncio.run(
            func(
                [PROMPT, PROMPT],
                [EPISODE, PLAIN],
                answer=["42", 42],
                prompt_id=[7, 7],
                trainer_state=TrainerState(global_step=21),
                environments=[Environment(True), Environment(False)],
                log_extra=extra.__setitem__,
                log_metric=metrics.__setitem__,
            )
        )
    assert rewards == [1.0, 0.0]
    assert [path for path, _, _ in recorder.requests] == ["/batch_score"]
    assert recorder.header("Authorization") == ["Bearer k"]
    (body,) = recorder.bodies
    items = body["items"]
    assert [item["rollout"]["messages"] for item in items] == [
        SENT_EPISODE,
        [SENT_EPISODE[0], PLAIN[0]],
    ]
    assert [item["rollout"]["outcome"] for item in items] == [{"solved": True}, {"solved": False}]
    assert [item["rollout"]["supplemental_context"] for item in items] == ["42", "42"]
    assert {item["rollout"]["group_id"] for item in items} == {"7"}
    assert items[0]["rollout"]["id"] != items[1]["rollout"]["id"]
    run = {"current_step": 21, "high_level_goal": "math", "total_steps": 100}
    assert [item["metadata"] for item in items] == [run, run]
    assert extra == {"amaris_status": ["scored", "scored"], "amaris_rubric_version": [3, 3]}
    assert metrics == {"amaris/unscored": 0.0, "amaris/rubric_version": 3.0}


def test_the_reward_functions_share_one_call_and_each_reads_its_key() -> None:
    recorder = Recorder([batch_answer(scored(0.9, VECTORS[0]), scored(0.1, VECTORS[1]))])
    extra: dict[str, list[Any]] = {}
    with recording_server(recorder) as url:
        funcs = amaris_reward_funcs(url, anchor_ids=["A1", "A2"])
        results = asyncio.run(
            gather(
                funcs,
                [PROMPT, PROMPT],
                [EPISODE, EPISODE],
                trainer_state=TrainerState(global_step=3),
                log_extra=lambda column, values: extra.setdefault(column, []).extend(values),
            )
        )
    assert [f.__name__ for f in funcs] == [
        "amaris",
        "amaris_anchors",
        "amaris_adaptive",
        "amaris_A1",
        "amaris_A2",
    ]
    assert results == [[0.9, 0.1], [0.75, 0.25], [None, None], [1.0, 0.0], [0.5, 0.5]]
    # one call for the five functions, two samples in it, logged once
    assert len(recorder.requests) == 1
    assert len(recorder.bodies[0]["items"]) == 2
    assert extra["amaris_status"] == ["scored", "scored"]


def test_a_function_reading_a_batch_again_makes_a_new_call() -> None:
    answer = batch_answer(scored(0.5, VECTORS[0]))
    recorder = Recorder([answer, answer])
    with recording_server(recorder) as url:
        scalar, anchors, *_ = amaris_reward_funcs(url)
        state = TrainerState(global_step=4)

        async def twice() -> list[Any]:
            first = await scalar([PROMPT], [EPISODE], trainer_state=state)
            shared = await anchors([PROMPT], [EPISODE], trainer_state=state)
            again = await scalar([PROMPT], [EPISODE], trainer_state=state)
            return [first, shared, again]

        assert asyncio.run(twice()) == [[0.5], [0.75], [0.5]]
    assert len(recorder.requests) == 2


def test_the_text_path_reads_the_keys_of_get_rewards_vectors() -> None:
    answer = reward_answer([0.9, None], statuses=["scored", "unscored"], versions=[2, None])
    answer["reward_vectors"] = [VECTORS[0], None]
    recorder = Recorder([(503, answer, {"Retry-After": "0"})])
    with recording_server(recorder) as url:
        funcs = amaris_reward_funcs(url, anchor_ids=["A1"], retry_seconds=0, name="judge")
        results = asyncio.run(gather(funcs, ["q", "q"], [" a", " b"]))
    assert [path for path, _, _ in recorder.requests] == ["/get_reward"]
    assert results == [[0.9, None], [0.75, None], [None, None], [1.0, None]]
    assert [f.__name__ for f in funcs] == ["judge", "judge_anchors", "judge_adaptive", "judge_A1"]


def test_unscored_items_are_sent_again_with_their_id_then_none() -> None:
    outage = scored(None, None, reason="judge_unavailable: HTTP 500")
    recorder = Recorder([batch_answer(scored(1.0, VECTORS[0]), outage)])
    recorder.answers += [batch_answer(outage)] * 20
    metrics: dict[str, float] = {}
    with recording_server(recorder) as url:
        funcs = amaris_reward_funcs(url, scalar=False, retry_seconds=0.3)
        results = asyncio.run(
            gather(funcs, [PROMPT, PROMPT], [EPISODE, PLAIN], log_metric=metrics.__setitem__)
        )
    assert results == [[0.75, None], [None, None]]
    first, *again = (body["items"] for body in recorder.bodies)
    # the unscored item alone, under the same rollout id, until the budget is spent
    assert again and all(items == [first[1]] for items in again)
    assert metrics["amaris/unscored"] == 1.0


def test_trajectories_forces_either_form() -> None:
    recorder = Recorder([batch_answer(scored(0.5, VECTORS[0])), (200, reward_answer([0.5]), {})])
    with recording_server(recorder) as url:
        as_messages = amaris_reward_func(url, trajectories=True)
        as_text = amaris_reward_func(url, trajectories=False)
        assert asyncio.run(as_messages([PROMPT], [PLAIN])) == [0.5]
        assert asyncio.run(as_text([PROMPT], [EPISODE])) == [0.5]
    assert [path for path, _, _ in recorder.requests] == ["/batch_score", "/get_reward"]
    assert recorder.bodies[0]["items"][0]["rollout"]["messages"] == [SENT_EPISODE[0], PLAIN[0]]
    assert "tool call: multiply" in recorder.bodies[1]["query"][0]


def test_an_invalid_sample_or_an_unknown_key_fails_loudly() -> None:
    invalid = {"score": None, "rubric_version": None, "status": "invalid"}
    invalid["reason"] = "items[0].rollout.messages: too long"
    recorder = Recorder([batch_answer(invalid), batch_answer(scored(0.5, VECTORS[0]))])
    with recording_server(recorder) as url:
        with pytest.raises(InvalidRequestError, match=r"items\[0\]\.rollout\.messages: too long"):
            asyncio.run(amaris_reward_func(url)([PROMPT], [EPISODE]))
        (typo,) = amaris_reward_funcs(url, anchor_ids=["A9"], scalar=False)[2:]
        with pytest.raises(ValueError, match=r"reward key 'A9' is not in amaris's reward vector"):
            asyncio.run(typo([PROMPT], [EPISODE]))
    with pytest.raises(ValueError, match=r"reward keys must be distinct"):
        amaris_reward_funcs("http://127.0.0.1:9", anchor_ids=["anchors"])
    with pytest.raises(TypeError, match=r"anchor_ids must be a list of ids, got the string 'A1'"):
        amaris_reward_funcs("http://127.0.0.1:9", anchor_ids="A1")
