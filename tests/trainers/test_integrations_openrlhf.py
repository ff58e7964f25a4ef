"""OpenRLHF: ``POST /get_reward`` through the real app, and ``reward_func`` over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from amaris.client import RewardUnavailableError
from amaris.integrations.openrlhf import reward_func
from amaris.settings import Settings
from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app, serve
from tests.support.fake_llm import FakeLLM, serve_in_thread
from tests.support.settings import llm_settings
from tests.support.testclient import TestClient

PROMPTS = ["<|user|>What is 6 * 7?<|assistant|>", "<|user|>What is 3 * 9?<|assistant|>"]
RESPONSES = ["6 * 7 = 42. The answer is 42.", "The answer is 28."]
LABELS = ["42", "27"]


def body(**overrides: Any) -> dict[str, Any]:
    """OpenRLHF's request: query = prompt + response."""
    return {
        "query": [p + r for p, r in zip(PROMPTS, RESPONSES, strict=True)],
        "prompts": PROMPTS,
        "labels": LABELS,
        **overrides,
    }


@contextmanager
def amaris_http(settings: Settings) -> Iterator[tuple[str, Any]]:
    """amaris on real uvicorn; yields its URL and its services."""
    app = in_memory_app(settings)
    with serve_in_thread(app) as url:
        yield url, app.state.services


def test_get_reward_answers_openrlhf_fields(offline_client: TestClient) -> None:
    r = offline_client.post("/get_reward", json=body(), headers={"X-Amaris-Step": "4"})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["rewards"] == [1.0, 0.0]
    assert data["scores"] == [1.0, 0.0]
    assert data["step"] == 4
    assert data["statuses"] == ["scored", "scored"]
    assert data["extra_logs"] == {
        "amaris_rubric_version": [1.0, 1.0],
        "amaris_unscored": [0.0, 0.0],
        "amaris_cached": [0.0, 0.0],
    }
    # logged like /batch_score rollouts: response without its prompt, label as context,
    # the prompt as group key
    records = offline_client.app.state.services.rollouts.load_step(4)  # type: ignore[attr-defined]
    assert [rec.rollout.output for rec in records] == RESPONSES
    assert [rec.rollout.input for rec in records] == PROMPTS
    assert [rec.rollout.supplemental_context for rec in records] == LABELS
    # no group id by default: the group of a rollout is then its input, the prompt
    assert [rec.rollout.group_id for rec in records] == [None, None]
    assert [rec.score for rec in records] == [1.0, 0.0]
    # same judge cache as /batch_score
    again = offline_client.post("/get_reward", json=body(), params={"step": 4}).json()
    assert again["extra_logs"]["amaris_cached"] == [1.0, 1.0]
    assert offline_client.get("/healthz").json()["counters"] == {"scored": 2, "cached": 2}


def test_step_header_query_or_the_open_step(offline_client: TestClient) -> None:
    first = offline_client.post("/get_reward", json=body()).json()
    assert first["step"] == 0  # nothing open yet
    assert offline_client.post("/get_reward", json=body(), params={"step": 3}).json()["step"] == 3
    # header wins over the query parameter; without either: the highest open step
    both = offline_client.post(
        "/get_reward", json=body(), params={"step": 9}, headers={"X-Amaris-Step": "5"}
    ).json()
    assert both["step"] == 5
    assert offline_client.post("/get_reward", json=body()).json()["step"] == 5
    services = offline_client.app.state.services  # type: ignore[attr-defined]
    assert {s: services.rollouts.count(s) for s in (0, 3, 5, 9)} == {0: 2, 3: 2, 5: 4, 9: 0}


def test_a_bos_token_before_the_prompt_is_tolerated(offline_client: TestClient) -> None:
    queries = ["<s>" + p + r for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    data = offline_client.post("/get_reward", json=body(query=queries)).json()
    assert data["rewards"] == [1.0, 0.0]


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"prompts": PROMPTS[:1]}, "prompts", "has 1 items; query has 2"),
        ({"labels": ["42", "27", "1"]}, "labels", "has 3 items; query has 2"),
        ({"group_ids": ["g"]}, "group_ids", "has 1 items; query has 2"),
        (
            {"query": [PROMPTS[0] + "42", "something else entirely"]},
            "query[1]",
            "does not contain prompts[1]",
        ),
        ({"query": []}, "query", "at least 1 item"),
        ({"prompts": None}, "prompts", "valid list"),
    ],
)
def test_bad_bodies_get_422_naming_the_field(
    offline_client: TestClient, overrides: dict[str, Any], field: str, message: str
) -> None:
    r = offline_client.post("/get_reward", json=body(**overrides))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert [d["field"] for d in detail] == [field]
    assert message in detail[0]["message"]
    assert offline_client.get("/healthz").json()["counters"] == {}


def test_bad_step_gets_422(offline_client: TestClient) -> None:
    r = offline_client.post("/get_reward", json=body(), headers={"X-Amaris-Step": "-1"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["field"] == "header.X-Amaris-Step"


def test_unscored_sample_makes_the_batch_503(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(status=500))  # the first judge call fails; the other is judged
    settings = llm_settings(
        tmp_path, fake_llm, **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 3}
    )
    with serve(settings) as client:
        r = client.post("/get_reward", json=body(), headers={"X-Amaris-Step": "2"})
    assert r.status_code == 503
    assert r.headers["Retry-After"] == "3"
    data = r.json()
    assert data["error"] == "unscored"
    assert sorted(data["statuses"]) == ["scored", "unscored"]
    missing = data["statuses"].index("unscored")
    assert data["rewards"][missing] is None
    assert data["rewards"][1 - missing] == [1.0, 0.0][1 - missing]
    assert data["extra_logs"]["amaris_unscored"][missing] == 1.0
    assert [d["field"] for d in data["detail"]] == [f"query[{missing}]"]
    assert data["detail"][0]["message"].startswith("judge_unavailable")


def test_neutral_policy_answers_the_neutral_score_flagged(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.push(Reply(status=500), Reply(status=500))
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "gateway.max_attempts": 1,
            "scoring.on_failure": "neutral",
            "scoring.neutral_score": 0.5,
        },
    )
    with serve(settings) as client:
        r = client.post("/get_reward", json=body())
    assert r.status_code == 200
    assert r.json()["rewards"] == [0.5, 0.5]
    assert r.json()["statuses"] == ["unscored", "unscored"]
    assert r.json()["extra_logs"]["amaris_unscored"] == [1.0, 1.0]


def test_reward_func_returns_tensors(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one judge failure: the sample is retried (only it) and then scored
    fake_llm.push(Reply(status=500))
    settings = llm_settings(
        tmp_path, fake_llm, **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 0}
    )
    with amaris_http(settings) as (url, services):
        monkeypatch.setenv("AMARIS_URL", url)
        monkeypatch.setenv("AMARIS_STEP", "7")
        queries = [p + r for p, r in zip(PROMPTS, RESPONSES, strict=True)]
        out = reward_func(queries, PROMPTS, LABELS, metas=None)
        assert torch.equal(out["rewards"], torch.tensor([1.0, 0.0]))
        assert torch.equal(out["scores"], torch.tensor([1.0, 0.0]))
        assert torch.equal(out["extra_logs"]["amaris_rubric_version"], torch.tensor([1.0, 1.0]))
        assert torch.equal(out["extra_logs"]["amaris_unscored"], torch.tensor([0.0, 0.0]))
        # 2 first attempts + 1 retry of the failed sample: 3 rollouts logged at step 7
        assert services.rollouts.count(7) == 3
        assert len(fake_llm.requests) == 3


def test_reward_func_unscored_raises_naming_amaris_reason(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_llm.push(*[Reply(status=500)] * 200)
    settings = llm_settings(
        tmp_path, fake_llm, **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 0}
    )
    with amaris_http(settings) as (url, _):
        monkeypatch.setenv("AMARIS_URL", url)
        monkeypatch.setenv("AMARIS_RETRY_SECONDS", "0.2")
        queries = [p + r for p, r in zip(PROMPTS, RESPONSES, strict=True)]
        with pytest.raises(
            RewardUnavailableError, match=r"2 of 2 samples unscored \(sample 0: judge_unavailable"
        ) as caught:
            reward_func(queries, PROMPTS, LABELS)
    assert caught.value.result.rewards == [None, None]
    assert caught.value.reasons[0].startswith("judge_unavailable")


def test_truncated_prompt_is_scored_against_the_whole_prompt(offline_client: TestClient) -> None:
    # OpenRLHF cut the prompt to its last tokens: the query starts with the prompt's tail
    # (here after a character the cut split, decoded as U+FFFD)
    prompt = "Some long context the trainer cut. " * 4 + PROMPTS[0]
    query = "\ufffd" + prompt[-30:] + RESPONSES[0]
    r = offline_client.post(
        "/get_reward",
        json={"query": [query], "prompts": [prompt], "labels": ["42"]},
        headers={"X-Amaris-Step": "6"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["rewards"] == [1.0]
    records = offline_client.app.state.services.rollouts.load_step(6)  # type: ignore[attr-defined]
    assert [rec.rollout.input for rec in records] == [prompt]
    assert [rec.rollout.output for rec in records] == [RESPONSES[0]]
    # a query that shares only a few characters with its prompt is still refused
    short = offline_client.post(
        "/get_reward", json={"query": ["ant|>" + RESPONSES[0]], "prompts": [prompt]}
    )
    assert short.status_code == 422
    assert short.json()["detail"][0]["field"] == "query[0]"


def test_a_query_a_subword_tokenizer_decoded_is_split_at_its_prompt(
    offline_client: TestClient,
) -> None:
    # all-MiniLM-L6-v2's WordPiece decode (tests/support/trainer_env.py): lower-cased,
    # punctuation spaced out, a space between prompt and response; and a cut prompt's tail
    # starting inside a word (##). The query holds neither prompt as the dataset has it.
    prompts = ["Don't guess: what is 6 * 7?", "Consider something carefully. What is 3 * 9?"]
    queries = [
        "don ' t guess : what is 6 * 7? the answer is 42.",
        "##thing carefully. what is 3 * 9? the answer is 28.",
    ]
    r = offline_client.post(
        "/get_reward",
        json={"query": queries, "prompts": prompts, "labels": ["42", "27"]},
        headers={"X-Amaris-Step": "7"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["rewards"] == [1.0, 0.0]
    records = offline_client.app.state.services.rollouts.load_step(7)  # type: ignore[attr-defined]
    assert [rec.rollout.input for rec in records] == prompts
    assert [rec.rollout.output for rec in records] == ["the answer is 42.", "the answer is 28."]
