"""The TRL reward function (``amaris.integrations.trl``) against a recording ``/get_reward``
server: the body and step it sends for what ``GRPOTrainer`` passes, and the rewards and logs
it makes of the answers. Needs no conftest fixture (mutation testing runs it with
``--noconftest``: bench/evaluations/mutation.py ``trl``); tests/trainers/test_contract_trl.py
runs TRL's own trainer against the real server."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from amaris.integrations.trl import amaris_reward_func
from tests.support.reward_recorder import Recorder, recording_server, reward_answer

PROMPT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 6 * 7?"},
]
RENDERED = "system: Be brief.\nuser: What is 6 * 7?"


@dataclass
class TrainerState:
    """The field of transformers' ``TrainerState`` the reward function reads."""

    global_step: int


@dataclass
class Logs:
    """What the function hands to TRL's ``log_extra`` and ``log_metric``."""

    extra: dict[str, list[Any]]
    metrics: dict[str, float]

    def kwargs(self) -> dict[str, Any]:
        return {
            "log_extra": lambda column, values: self.extra.__setitem__(column, values),
            "log_metric": lambda name, value: self.metrics.__setitem__(name, value),
        }


def call(func: Any, prompts: list[Any], completions: list[Any], **kwargs: Any) -> Any:
    return asyncio.run(func(prompts, completions, **kwargs))


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AMARIS_URL", "AMARIS_API_KEY", "AMARIS_STEP"):
        monkeypatch.delenv(name, raising=False)


def test_a_conversational_batch_is_sent_with_its_columns_step_and_run() -> None:
    recorder = Recorder([(200, reward_answer([1.0, 0.0], step=21, versions=[3, 2]), {})])
    logs = Logs({}, {})
    with recording_server(recorder) as url:
        func = amaris_reward_func(
            url, api_key="k", high_level_goal="math", model_size="7B", total_steps=100
        )
        rewards = call(
            func,
            [PROMPT, PROMPT],
            [
                [{"role": "assistant", "content": "The answer is 42."}],
                [{"role": "assistant", "content": "40"}],
            ],
            completion_ids=[[1, 2], [3, 4]],
            answer=["42", "42"],
            prompt_id=[7, 7],
            trainer_state=TrainerState(global_step=21),
            **logs.kwargs(),
        )
    assert rewards == [1.0, 0.0]
    assert recorder.bodies == [
        {
            "query": [RENDERED + "The answer is 42.", RENDERED + "40"],
            "prompts": [RENDERED, RENDERED],
            "labels": ["42", "42"],
            "group_ids": ["7", "7"],
            "amaris_metadata": {"high_level_goal": "math", "model_size": "7B", "total_steps": 100},
        }
    ]
    assert [path for path, _, _ in recorder.requests] == ["/get_reward"]
    assert recorder.header("X-Amaris-Step") == ["21"]
    assert recorder.header("Authorization") == ["Bearer k"]
    assert logs.extra == {"amaris_status": ["scored", "scored"], "amaris_rubric_version": [3, 2]}
    assert logs.metrics == {"amaris/unscored": 0.0, "amaris/rubric_version": 3.0}
    assert func.__name__ == func.__qualname__ == "amaris"


def test_the_step_is_the_trainers_even_zero_else_the_environment_else_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder([(200, reward_answer([0.5]), {})] * 4)
    with recording_server(recorder) as url:
        func = amaris_reward_func(url)
        call(func, ["p"], ["c"], trainer_state=TrainerState(global_step=0))
        call(func, ["p"], ["c"], trainer_state=None)
        monkeypatch.setenv("AMARIS_STEP", "7")
        call(func, ["p"], ["c"])
        call(func, ["p"], ["c"], trainer_state=TrainerState(global_step=2))
    assert recorder.header("X-Amaris-Step") == ["0", None, "7", "2"]
    assert recorder.header("Authorization") == [None] * 4


def test_plain_strings_without_columns_or_run() -> None:
    recorder = Recorder([(200, reward_answer([0.5, 0.25]), {})])
    with recording_server(recorder) as url:
        func = amaris_reward_func(url, name="judge", group_column=None, reference_column=None)
        rewards = call(func, ["q", "q"], [" a", " b"], answer=["x", "y"], prompt_id=["g", "g"])
    assert rewards == [0.5, 0.25]
    assert recorder.bodies == [{"query": ["q a", "q b"], "prompts": ["q", "q"]}]
    assert func.__name__ == func.__qualname__ == "judge"


def test_missing_columns_are_left_out() -> None:
    recorder = Recorder([(200, reward_answer([0.5]), {})])
    with recording_server(recorder) as url:
        rewards = call(amaris_reward_func(url, total_steps=0), ["q"], ["a"])
    assert rewards == [0.5]
    assert recorder.bodies == [
        {"query": ["qa"], "prompts": ["q"], "amaris_metadata": {"total_steps": 0}}
    ]


def test_a_column_or_completions_of_another_length_are_refused_naming_them() -> None:
    func = amaris_reward_func("http://127.0.0.1:9")
    with pytest.raises(
        ValueError, match=r"^dataset column 'answer' has 1 values for 2 completions$"
    ):
        call(func, ["p", "p"], ["a", "b"], answer=["x"])
    with pytest.raises(ValueError, match=r"^dataset column 'prompt_id' has 3 values for 2 "):
        call(func, ["p", "p"], ["a", "b"], prompt_id=[1, 2, 3])
    with pytest.raises(ValueError, match=r"^2 prompts for 1 completions$"):
        call(func, ["p", "p"], ["a"])
    with pytest.raises(ValueError, match=r"^1 prompts for 2 completions$"):
        call(func, ["p"], ["a", "b"])


def test_unscored_samples_are_none_and_counted() -> None:
    answer = reward_answer(
        [0.75, None, None], statuses=["scored", "unscored", "unscored"], versions=[4, None, 0]
    )
    recorder = Recorder([(503, answer, {"Retry-After": "0"})])
    logs = Logs({}, {})
    with recording_server(recorder) as url:
        func = amaris_reward_func(url, retry_seconds=0)
        rewards = call(func, ["p"] * 3, ["a", "b", "c"], **logs.kwargs())
    assert rewards == [0.75, None, None]
    assert logs.extra == {
        "amaris_status": ["scored", "unscored", "unscored"],
        "amaris_rubric_version": [4, None, None],
    }
    assert logs.metrics == {"amaris/unscored": 2.0, "amaris/rubric_version": 4.0}


def test_without_a_rubric_version_no_version_metric_and_no_callbacks_no_logs() -> None:
    answer = reward_answer([None], statuses=["unscored"], versions=[None])
    recorder = Recorder([(503, answer, {"Retry-After": "0"})] * 2)
    logs = Logs({}, {})
    with recording_server(recorder) as url:
        func = amaris_reward_func(url, retry_seconds=0)
        assert call(func, ["p"], ["a"], **logs.kwargs()) == [None]
        assert call(func, ["p"], ["a"], log_extra="not callable", log_metric=None) == [None]
    assert logs.metrics == {"amaris/unscored": 1.0}
    assert logs.extra == {"amaris_status": ["unscored"], "amaris_rubric_version": [None]}


def test_the_defaults_reach_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder([(200, reward_answer([1.0]), {})])
    with recording_server(recorder) as url:
        monkeypatch.setenv("AMARIS_URL", url)
        monkeypatch.setenv("AMARIS_API_KEY", "env-key")
        func = amaris_reward_func()
        assert call(func, ["p"], ["a"], answer=[None], prompt_id=["g"]) == [1.0]
    assert recorder.header("Authorization") == ["Bearer env-key"]
    assert recorder.bodies == [
        {"query": ["pa"], "prompts": ["p"], "labels": [None], "group_ids": ["g"]}
    ]


def test_a_batch_of_more_than_256_completions_with_columns() -> None:
    # lengths past 256 are distinct int objects: compared by value, not identity
    size = 300
    recorder = Recorder([(200, reward_answer([0.5] * size), {})])
    with recording_server(recorder) as url:
        func = amaris_reward_func(url)
        prompts, completions = [f"p{i}" for i in range(size)], ["c"] * size
        rewards = call(func, prompts, completions, answer=["a"] * size, prompt_id=[1] * size)
    assert rewards == [0.5] * size
    assert len(recorder.bodies[0]["labels"]) == size
