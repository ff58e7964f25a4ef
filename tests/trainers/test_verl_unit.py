"""The verl reward function (``amaris.integrations.verl``) against a local ``/get_reward``:
the body and step it sends for a sample, and the answer it gives verl for each outcome.
Needs no fixture of tests/conftest.py (mutation testing runs it with ``--noconftest``:
bench/evaluations/mutation.py ``verl``); tests/trainers/test_integrations_verl.py and the
trainer-contract files cover the same against a real amaris."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from amaris.client import STEP_HEADER, InvalidRequestError, Rewards, ServerUnavailableError
from amaris.integrations import verl
from amaris.integrations._remote import DEFAULT_URL, Target
from amaris.integrations.verl import RewardUnavailableError, compute_score, compute_score_async
from tests.support.reward_recorder import Recorder, recording_server

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "6 * 7?"}]


def answer(
    reward: float | None, status: str = "scored", version: int | None = 3, step: int = 5
) -> dict[str, Any]:
    return {
        "rewards": [reward],
        "scores": [reward],
        "statuses": [status],
        "extra_logs": {"amaris_rubric_version": [version]},
        "step": step,
    }


@contextmanager
def server(*answers: tuple[int, dict[str, Any]]) -> Iterator[tuple[str, Recorder]]:
    """A local ``/get_reward`` giving ``answers`` in order; the recorder of what it received."""
    recorder = Recorder([(code, data, {}) for code, data in answers])
    with recording_server(recorder) as url:
        yield url, recorder


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AMARIS_URL", "AMARIS_API_KEY", "AMARIS_STEP"):
        monkeypatch.delenv(name, raising=False)


SCORED = {
    "rubric_version": 3,
    "status": "scored",
    "reason": "",
    "unscored": 0.0,
    "anchors": None,  # a server without reward vectors
    "adaptive": None,
}
KEYS = ["anchors", "adaptive"]


# -- the request and the answer, without HTTP (first: the fast checks) ------------------


def test_the_request_of_a_sample() -> None:
    info = {"prompt": "P: ", "question": "Q", "uid": 0, "index": 2, "global_steps": 4}
    run = {"high_level_goal": "g", "model_size": None, "total_steps": 9, "other_context": ""}
    target, body, step = verl._request("ds", "r", "42", info, {"url": "http://h/", **run})
    assert target == Target("http://h", None, 600.0, 60.0)
    assert body == {
        "query": ["P: r"],
        "prompts": ["P: "],
        "labels": ["42"],
        "group_ids": ["0"],
        "amaris_metadata": {"high_level_goal": "g", "total_steps": 9, "other_context": ""},
    }
    assert step == 4
    kwargs = {"api_key": "k", "timeout": "5", "retry_seconds": 0, "step": 0, "model_size": "7B"}
    target, body, step = verl._request("ds", "r", None, {"question": CHAT}, kwargs)
    assert target == Target(DEFAULT_URL, "k", 5.0, 0.0)
    assert body["group_ids"] is None and body["amaris_metadata"] == {"model_size": "7B"}
    assert body["prompts"] == ["system: Be brief.\nuser: 6 * 7?"] and step == 0
    _, body, step = verl._request("ds", "r", None, {"question": "Q", "index": 0}, {})
    assert body["group_ids"] == ["ds/0"] and body["amaris_metadata"] is None and step is None
    assert verl._step({"global_steps": 0}, {"step": None}) == 0
    assert verl._group("ds", {"uid": None, "index": None}) is None
    assert verl._prompt({"prompt": "", "question": "Q"}) == "Q"


def test_the_answer_for_each_outcome() -> None:
    assert verl._result(Rewards([0.75], ["scored"], [3]), KEYS) == {"score": 0.75, **SCORED}
    vector = {"anchors": 0.5, "adaptive": None, "A1": 1.0, "A2": 0.0, "R4": 0.25}
    scored = verl._result(Rewards([0.75], ["scored"], [3], None, [vector]), [*KEYS, "A2"])
    # the named anchors, never the adaptive ids (they come and go with the rubric)
    assert scored == {**SCORED, "score": 0.75, "anchors": 0.5, "A2": 0.0}
    with pytest.raises(ValueError, match=r"anchor_ids names 'A3'.*'A1', 'A2'"):
        verl._result(Rewards([0.75], ["scored"], [3], None, [vector]), [*KEYS, "A3"])
    neutral = verl._result(Rewards([0.5], ["unscored"], [None], None, [None]), [*KEYS, "A1"])
    assert neutral == {
        "score": 0.5,
        "rubric_version": 0,
        "status": "unscored",
        "reason": verl.NEUTRAL_REASON,
        "unscored": 1.0,
        "anchors": 0.5,
        "adaptive": 0.5,
        "A1": 0.5,
    }
    outage = RewardUnavailableError(Rewards([None], ["unscored"], [4]), {0: "judge down"})
    with pytest.raises(RewardUnavailableError):
        verl._fallback(outage, {}, KEYS)
    assert verl._fallback(outage, {"unscored_score": "0.25"}, [*KEYS, "A1"]) == {
        "score": 0.25,
        "rubric_version": 4,
        "status": "unscored",
        "reason": str(outage),
        "unscored": 1.0,
        "anchors": 0.25,
        "adaptive": 0.25,
        "A1": 0.25,
    }
    unversioned = RewardUnavailableError(Rewards([None], ["unscored"], [None]), {0: "x"})
    assert verl._fallback(unversioned, {"unscored_score": 0}, KEYS)["rubric_version"] == 0
    down = ServerUnavailableError("amaris unreachable")
    assert verl._fallback(down, {"unscored_score": 1}, KEYS) == {
        "score": 1.0,
        "rubric_version": 0,
        "status": "error",
        "reason": "amaris unreachable",
        "unscored": 1.0,
        "anchors": 1.0,
        "adaptive": 1.0,
    }


def test_anchor_ids_are_a_list_or_comma_separated_and_only_anchor_ids() -> None:
    assert verl._anchor_ids(None) == [] and verl._anchor_ids("") == []
    assert verl._anchor_ids(["A1", "A12"]) == ["A1", "A12"]
    assert verl._anchor_ids("A1, A2") == ["A1", "A2"]
    for wrong in (["R3"], "anchors", ["A"], "A1,A1b"):
        with pytest.raises(ValueError, match="anchor_ids"):
            verl._anchor_ids(wrong)


# -- against a local /get_reward ---------------------------------------------------------


@pytest.mark.parametrize("call", ["sync", "async"])
def test_a_sample_is_sent_with_its_prompt_group_step_and_run(call: str) -> None:
    with server((200, answer(0.75))) as (url, script):
        kwargs = {
            "url": url,
            "api_key": "k",
            "timeout": 5,
            "high_level_goal": "math",
            "model_size": None,
            "total_steps": 9,
            "reward_router_address": "127.0.0.1:9",  # verl's reward-model kwargs: ignored
        }
        info = {"prompt": "P: ", "question": "Q", "uid": 0, "index": 2, "global_steps": 4}
        args = ("ds", "resp", {"ground_truth": "42"}, info)
        if call == "sync":
            result = compute_score(*args, **kwargs)
        else:
            result = asyncio.run(compute_score_async(*args, **kwargs))
    assert result == {"score": 0.75, **SCORED}
    ((headers, body),) = script.sent()
    assert body == {
        "query": ["P: resp"],
        "prompts": ["P: "],
        "labels": [{"ground_truth": "42"}],
        "group_ids": ["0"],
        "amaris_metadata": {"high_level_goal": "math", "total_steps": 9},
    }
    assert headers[STEP_HEADER.lower()] == "4"
    assert headers["authorization"] == "Bearer k"


def test_the_prompt_is_prompt_else_question_rendered_and_none_is_an_error() -> None:
    with server(*[(200, answer(1.0))] * 3) as (url, script):
        compute_score("ds", "r", None, {"prompt": "", "question": "Q? "}, url=url)
        compute_score("ds", "r", None, {"question": CHAT}, url=url)
        compute_score("ds", "r", None, {"prompt": CHAT, "question": "Q"}, url=url)
        with pytest.raises(ValueError, match=r"extra_info\['prompt'\].*raw_prompt"):
            compute_score("ds", "r", None, {"question": ""}, url=url)
        with pytest.raises(ValueError, match="prompt"):
            compute_score("ds", "r", None, None, url=url)
    rendered = "system: Be brief.\nuser: 6 * 7?"
    assert [b["prompts"] for _, b in script.sent()] == [["Q? "], [rendered], [rendered]]
    queries = [["Q? r"], [rendered + "r"], [rendered + "r"]]
    assert [b["query"] for _, b in script.sent()] == queries


def test_the_group_is_the_uid_else_source_and_index_else_none() -> None:
    with server(*[(200, answer(1.0))] * 4) as (url, script):
        for info in ({"uid": "u", "index": 1}, {"index": 0}, {"uid": None, "index": 7}, {}):
            compute_score("ds", "r", "42", {"question": "Q", **info}, url=url)
    groups = [b.get("group_ids") for _, b in script.sent()]
    assert groups == [["u"], ["ds/0"], ["ds/7"], None]
    assert all("amaris_metadata" not in b for _, b in script.sent())


def test_the_step_is_the_argument_else_global_steps_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with server(*[(200, answer(1.0))] * 5) as (url, script):
        compute_score("ds", "r", "42", {"question": "Q", "global_steps": 3}, url=url, step=0)
        compute_score("ds", "r", "42", {"question": "Q", "global_steps": 0}, url=url, step=None)
        compute_score("ds", "r", "42", {"question": "Q"}, url=url)
        monkeypatch.setenv("AMARIS_STEP", "6")
        compute_score("ds", "r", "42", {"question": "Q"}, url=url)
        compute_score("ds", "r", "42", {"question": "Q", "global_steps": "2"}, url=url)
    steps = [h.get(STEP_HEADER.lower()) for h, _ in script.sent()]
    assert steps == ["0", "0", None, "6", "2"]


def test_the_server_and_key_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with server((200, answer(1.0))) as (url, script):
        monkeypatch.setenv("AMARIS_URL", url)
        monkeypatch.setenv("AMARIS_API_KEY", "env-key")
        assert compute_score("ds", "r", "42", {"question": "Q"})["score"] == 1.0
    assert script.sent()[0][0]["authorization"] == "Bearer env-key"


def test_a_neutral_score_is_flagged_unscored_with_its_reason() -> None:
    with server((200, answer(0.5, status="unscored", version=None))) as (url, _):
        result = compute_score("ds", "r", "42", {"question": "Q"}, url=url)
    assert result == {
        "score": 0.5,
        "rubric_version": 0,
        "status": "unscored",
        "reason": verl.NEUTRAL_REASON,
        "unscored": 1.0,
        "anchors": 0.5,
        "adaptive": 0.5,
    }
    assert "scoring.on_failure: neutral" in verl.NEUTRAL_REASON


@pytest.mark.parametrize("call", ["sync", "async"])
def test_an_outage_raises_or_gives_unscored_score(call: str) -> None:
    unscored = answer(None, status="unscored", version=4)
    unscored["detail"] = [{"field": "query[0]", "message": "judge_unavailable: down"}]

    def run(url: str, **kwargs: Any) -> Any:
        args = ("ds", "r", "42", {"question": "Q"})
        if call == "sync":
            return compute_score(*args, url=url, retry_seconds=0, **kwargs)
        return asyncio.run(compute_score_async(*args, url=url, retry_seconds=0, **kwargs))

    with server(*[(503, unscored)] * 3) as (url, _):
        with pytest.raises(RewardUnavailableError, match="judge_unavailable: down"):
            run(url)
        with pytest.raises(RewardUnavailableError):
            run(url, unscored_score="")
        result = run(url, unscored_score="0.25")
    assert result["score"] == 0.25 and result["status"] == "unscored"
    assert result["rubric_version"] == 4 and result["unscored"] == 1.0
    assert "judge_unavailable: down" in result["reason"]
    with server((500, {"detail": "boom"}), (500, {"detail": "boom"})) as (url, _):
        with pytest.raises(ServerUnavailableError, match="HTTP 500"):
            run(url)
        failed = run(url, unscored_score=0)
    assert failed == {
        "score": 0.0,
        "rubric_version": 0,
        "status": "error",
        "reason": failed["reason"],
        "unscored": 1.0,
        "anchors": 0.0,
        "adaptive": 0.0,
    }
    assert "HTTP 500" in failed["reason"]


def test_a_refused_sample_is_raised_even_with_unscored_score() -> None:
    refused = {"detail": [{"field": "query[0]", "message": "too long"}]}
    with server((422, refused)) as (url, _), pytest.raises(InvalidRequestError, match="too long"):
        compute_score("ds", "r", "42", {"question": "Q"}, url=url, unscored_score=0.0)


# -- an agent episode (AmarisToolAgentLoop's record), against a local /batch_score --------

EPISODE = {
    "messages": [  # as verl's loop holds them: arguments parsed, no call ids
        {"role": "user", "content": "6 * 7?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "mul", "arguments": {"b": 7, "a": 6}}}
            ],
        },
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "42."},
    ],
    "finish_reason": "stop",
    "outcome": {"tests_passed": 1},
}


def item(score: float | None, status: str = "scored", **more: Any) -> dict[str, Any]:
    """One ``/batch_score`` result."""
    return {"score": score, "rubric_version": 3, "status": status, **more}


@pytest.mark.parametrize("call", ["sync", "async"])
def test_an_episode_is_sent_as_a_trajectory_not_as_text(call: str) -> None:
    vector = {"anchors": 1.0, "adaptive": None, "A1": 1.0, "R2": 0.5}
    with server((200, {"results": [item(1.0, rewards=vector)]})) as (url, script):
        info = {"extras": EPISODE, "num_turns": np.int32(4), "index": 2, "global_steps": 4}
        kwargs = {"url": url, "high_level_goal": "math", "anchor_ids": "A1"}
        args = ("ds", "<the decoded response>", {"ground_truth": "42"}, info)
        if call == "sync":
            result = compute_score(*args, **kwargs)
        else:
            result = asyncio.run(compute_score_async(*args, **kwargs))
    assert result == {**SCORED, "score": 1.0, "anchors": 1.0, "A1": 1.0}
    assert [path for path, _, _ in script.requests] == ["/batch_score"]
    ((headers, body),) = script.sent()
    assert STEP_HEADER.lower() not in headers
    ((sent,),) = [body.pop("items")]
    assert body == {"include_breakdown": False}
    assert sent["metadata"] == {"high_level_goal": "math", "current_step": 4}
    rollout = sent["rollout"]
    assert rollout.pop("id").startswith("verl-")
    call_made = {"id": "call_1_0", "type": "function"}
    assert rollout == {
        "messages": [
            {"role": "user", "content": "6 * 7?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {**call_made, "function": {"name": "mul", "arguments": '{"a": 6, "b": 7}'}}
                ],
            },
            {"role": "tool", "content": "42", "tool_call_id": "call_1_0"},
            {"role": "assistant", "content": "42."},
        ],
        "finish_reason": "stop",
        "outcome": {"tests_passed": 1},
        "supplemental_context": '{"ground_truth": "42"}',
        "metadata": {"data_source": "ds", "num_turns": 4},
        "group_id": "ds/2",
    }


def test_an_unscored_episode_is_sent_again_then_raised_or_given_unscored_score() -> None:
    unscored = item(None, "unscored", reason="judge_unavailable: down")
    info = {"extras": EPISODE}
    answers = [(200, {"results": [unscored]}), (429, {"detail": "busy"})]
    with server(*answers, (200, {"results": [item(0.5)]})) as (url, script):
        result = compute_score("ds", "r", "42", info, url=url, retry_seconds=30)
    assert result["score"] == 0.5 and result["status"] == "scored"
    # the same rollout each time: an identical retry, which a step's analysis counts once
    ids = [body["items"][0]["rollout"]["id"] for body in script.bodies]
    assert len(ids) == 3 and len(set(ids)) == 1
    with server(*[(200, {"results": [unscored]})] * 2) as (url, _):
        with pytest.raises(RewardUnavailableError, match="judge_unavailable: down"):
            compute_score("ds", "r", "42", info, url=url, retry_seconds=0)
        fallback = compute_score(
            "ds", "r", "42", info, url=url, retry_seconds=0, unscored_score=0.0, anchor_ids=["A1"]
        )
    assert fallback["status"] == "unscored" and fallback["rubric_version"] == 3
    assert [fallback[k] for k in ("score", "anchors", "adaptive", "A1")] == [0.0] * 4
    # a neutral score (scoring.on_failure: neutral) is a reward: not sent again
    with server((200, {"results": [item(0.5, "unscored")]})) as (url, script):
        neutral = compute_score("ds", "r", "42", info, url=url)
    assert neutral["reason"] == verl.NEUTRAL_REASON and len(script.requests) == 1


def test_a_refused_episode_is_raised_naming_its_field_even_with_unscored_score() -> None:
    reason = "items[0].rollout.messages[3].tool_call_id: a tool message names its tool_call_id"
    refused = {"results": [item(None, "invalid", reason=reason)]}
    with server((200, refused)) as (url, _), pytest.raises(InvalidRequestError) as raised:
        compute_score("ds", "r", "42", {"extras": EPISODE}, url=url, unscored_score=0.0)
    assert raised.value.fields == ["items[0].rollout.messages[3].tool_call_id"]
    assert "a tool message names" in str(raised.value)
