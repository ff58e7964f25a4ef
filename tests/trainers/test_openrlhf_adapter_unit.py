"""OpenRLHF's reward function file (``amaris.integrations.openrlhf``) against a recording
``/get_reward`` server: the body and step it sends, the tensors it returns, its errors. Needs
no conftest fixture (mutation testing runs it with ``--noconftest``:
bench/evaluations/mutation.py ``openrlhf``); tests/trainers/test_contract_openrlhf.py runs
OpenRLHF's own code against the real server."""

from __future__ import annotations

import pytest
import torch

from amaris.integrations.openrlhf import RewardUnavailableError, reward_func
from tests.support.reward_recorder import Recorder, recording_server, reward_answer


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AMARIS_URL", "AMARIS_API_KEY", "AMARIS_STEP", "AMARIS_RETRY_SECONDS"):
        monkeypatch.delenv(name, raising=False)


def test_a_batch_is_sent_and_answered_as_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = reward_answer([1.0, 0.5], statuses=["scored", "unscored"], versions=[3, None], step=5)
    recorder = Recorder([(200, answer, {})])
    with recording_server(recorder) as url:
        monkeypatch.setenv("AMARIS_URL", url)
        monkeypatch.setenv("AMARIS_API_KEY", "k")
        monkeypatch.setenv("AMARIS_STEP", "5")
        out = reward_func(("q1", "q2"), ("p", "p"), ("42", 7), model="ignored")
    assert recorder.bodies == [{"query": ["q1", "q2"], "prompts": ["p", "p"], "labels": ["42", 7]}]
    assert recorder.header("X-Amaris-Step") == ["5"]
    assert recorder.header("Authorization") == ["Bearer k"]
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert out["rewards"].tolist() == [1.0, 0.5]
    assert out["scores"].tolist() == [1.0, 0.5]
    assert out["scores"] is not out["rewards"]
    assert set(out["extra_logs"]) == {"amaris_rubric_version", "amaris_unscored"}
    assert out["extra_logs"]["amaris_rubric_version"].tolist() == [3.0, 0.0]
    assert out["extra_logs"]["amaris_unscored"].tolist() == [0.0, 1.0]
    for tensor in (out["rewards"], out["scores"], *out["extra_logs"].values()):
        assert tensor.dtype == torch.float32


def test_without_labels_or_step_none_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder([(200, reward_answer([0.0]), {})])
    with recording_server(recorder) as url:
        monkeypatch.setenv("AMARIS_URL", url)
        out = reward_func(["q"], ["p"])
    assert recorder.bodies == [{"query": ["q"], "prompts": ["p"]}]
    assert recorder.header("X-Amaris-Step") == [None]
    assert recorder.header("Authorization") == [None]
    assert out["rewards"].tolist() == [0.0]


def test_unscored_after_the_retries_raises_naming_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    detail = [{"field": "query[0]", "message": "judge_unavailable: HTTP 500"}]
    answer = reward_answer([None], detail=detail)
    recorder = Recorder([(503, answer, {"Retry-After": "0"})])
    with recording_server(recorder) as url:
        monkeypatch.setenv("AMARIS_URL", url)
        monkeypatch.setenv("AMARIS_RETRY_SECONDS", "0")
        with pytest.raises(RewardUnavailableError, match="judge_unavailable") as info:
            reward_func(["q"], ["p"], [None])
    assert str(info.value) == "1 of 1 samples unscored (sample 0: judge_unavailable: HTTP 500)"
    assert recorder.bodies == [{"query": ["q"], "prompts": ["p"], "labels": [None]}]


def test_a_bad_retry_setting_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMARIS_RETRY_SECONDS", "soon")
    with pytest.raises(ValueError, match=r"^AMARIS_RETRY_SECONDS must be a number, got 'soon'$"):
        reward_func(["q"], ["p"])
