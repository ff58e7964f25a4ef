"""Sharper rewards (opt-in): k sampled verdicts per criterion, and expected scores from the
judge's logprobs; through the real app, the judge faked at the gateway seam."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from amaris.agents.prompts import data_message
from amaris.llm.providers import TokenLogprob, parse_logprobs
from amaris.offline.sampling import DOUBT_MAX, VerdictSampler
from amaris.scoring.verdicts import combine, expected_scores
from amaris.settings import ConfigError, load_settings
from amaris.sim.driver import RolloutResult
from amaris.sim.judge_server import FaultProfile, Reply, create_llm_app, offline_responder
from amaris.sim.metrics import zero_variance
from amaris.sim.policy import Policy
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, serve_in_thread, token_logprobs, verdicts_with_logprobs
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

RUBRIC: dict[str, Any] = {
    "anchor_rubrics": [{"text": "The response gives the correct final answer.", "weight": 1.0}],
    "adaptive_rubrics": [{"text": "The response explains its reasoning steps.", "weight": 1.0}],
}
"""A1 and R1, weight 1 each: the reward is the mean of their verdicts / 4."""


def score(client: TestClient, output: str = "4") -> dict[str, Any]:
    r = client.post(
        "/score",
        json={
            "rollout": {
                "id": "r1",
                "input": "What is 2+2?",
                "output": output,
                "supplemental_context": "4",
            },
            "include_breakdown": True,
        },
    )
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def verdicts(a1: int, r1: int) -> Reply:
    items = [
        {"id": "A1", "reason": f"A1 is {a1}", "score": a1},
        {"id": "R1", "reason": f"R1 is {r1}", "score": r1},
    ]
    return Reply(content=json.dumps({"verdicts": items}))


# -- samples ------------------------------------------------------------------------------------


def test_three_samples_make_three_calls_and_report_mean_and_agreement(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.push(verdicts(4, 2), verdicts(4, 3), verdicts(2, 3))
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **RUBRIC,
        **{"agents.scorer.samples": 3, "agents.scorer.temperature": 1.0},
    )
    with serve(settings) as client:
        result = score(client)
    scorer_calls = [
        r
        for r in fake_llm.requests
        if '"agent":"scorer"' in r["messages"][-1]["content"].replace(" ", "")
    ]
    assert len(scorer_calls) == 3
    assert all(r["temperature"] == 1.0 for r in scorer_calls)
    assert result["status"] == "scored"
    a1, r1 = result["breakdown"]
    assert sorted(a1["samples"]) == [2, 4, 4]
    assert a1["verdict"] == pytest.approx(10 / 3)
    assert a1["agreement"] == pytest.approx(2 / 3)
    assert sorted(r1["samples"]) == [2, 3, 3]
    assert r1["verdict"] == pytest.approx(8 / 3)
    assert r1["agreement"] == pytest.approx(2 / 3)
    assert a1["from_logprobs"] is None
    # The reward aggregates the fractional means: (10/3 + 8/3) / 4 / 2.
    assert result["score"] == pytest.approx(0.75)


def test_one_failed_sample_leaves_the_rollout_unscored(tmp_path: Path, fake_llm: FakeLLM) -> None:
    bad = Reply(content="no verdict here")
    fake_llm.push(verdicts(4, 4), bad, bad)
    settings = llm_settings(tmp_path, fake_llm, **RUBRIC, **{"agents.scorer.samples": 2})
    with serve(settings) as client:
        result = score(client)
    assert result["status"] == "unscored"
    assert result["score"] is None
    assert result["reason"].startswith("judge_invalid")


def test_default_breakdown_is_unchanged(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(verdicts(4, 2))
    with serve(llm_settings(tmp_path, fake_llm, **RUBRIC)) as client:
        result = score(client)
    assert len(fake_llm.requests) == 1
    assert "logprobs" not in fake_llm.requests[0]
    a1 = result["breakdown"][0]
    assert a1["verdict"] == 4 and isinstance(a1["verdict"], int)
    assert (a1["samples"], a1["agreement"], a1["from_logprobs"]) == (None, None, None)


# -- logprobs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("score_first", [False, True])
def test_logprobs_give_the_expected_score(
    tmp_path: Path, fake_llm: FakeLLM, score_first: bool
) -> None:
    # A reason quoting a score must not be taken for one: only keys outside strings count.
    fake_llm.push(
        verdicts_with_logprobs(
            ("A1", {4: 0.7, 3: 0.2, 0: 0.1}),
            ("R1", {2: 0.5, 1: 0.25, 3: 0.25}),
            reason='says "score": 0',
            score_first=score_first,
        )
    )
    settings = llm_settings(tmp_path, fake_llm, **RUBRIC, **{"agents.scorer.logprobs": True})
    with serve(settings) as client:
        result = score(client)
        counters = client.get("/healthz").json()["counters"]
    request = fake_llm.requests[0]
    assert request["logprobs"] is True and request["top_logprobs"] == 10
    a1, r1 = result["breakdown"]
    assert a1["verdict"] == pytest.approx(4 * 0.7 + 3 * 0.2)
    assert r1["verdict"] == pytest.approx(2 * 0.5 + 1 * 0.25 + 3 * 0.25)
    assert a1["from_logprobs"] == r1["from_logprobs"] == 1
    assert result["score"] == pytest.approx((3.4 + 2.0) / 8)
    assert counters["logprobs_used"] == 1
    assert "logprobs_missing" not in counters


def test_missing_logprobs_fall_back_to_the_verdict_and_are_counted(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # A reply without logprobs, and one whose logprobs stop before the answer's end.
    whole = verdicts_with_logprobs(("A1", {4: 0.5, 3: 0.5}), ("R1", {2: 1.0}))
    assert whole.logprobs is not None
    cut = Reply(content=whole.content, logprobs=whole.logprobs[:12])
    fake_llm.push(verdicts(4, 2), cut)
    settings = llm_settings(
        tmp_path, fake_llm, **RUBRIC, **{"agents.scorer.logprobs": True, "agents.scorer.samples": 2}
    )
    with serve(settings) as client:
        result = score(client)
        counters = client.get("/healthz").json()["counters"]
    assert result["status"] == "scored"
    a1, r1 = result["breakdown"]
    assert a1["samples"] == [4, 4] and r1["samples"] == [2, 2]
    assert a1["from_logprobs"] == 0
    assert counters["logprobs_missing"] == 2
    assert result["score"] == pytest.approx(0.75)


def test_expected_scores_skip_inline_reasoning_and_read_merged_tokens() -> None:
    # A think block with a draft score, then the answer; the tokenizer merged ' 3' and '}'.
    pieces: list[str | dict[str, float]] = [
        '<think>{"score": 1}</think>{"verdicts": [{"id": "A1", "score":',
        {" 3}": 0.5, " 4}": 0.25, " 2": 0.25},
        "]}",
    ]
    _, raw = token_logprobs(pieces)
    tokens = parse_logprobs({"content": raw})
    assert tokens is not None
    answer = '{"verdicts": [{"id": "A1", "score": 3}]}'
    assert expected_scores(tokens, answer, [3]) == [pytest.approx(3 * 0.5 + 4 * 0.25 + 2 * 0.25)]
    # The chosen token must be the verdict's score, and the counts must agree.
    assert expected_scores(tokens, answer, [4]) is None
    assert expected_scores(tokens, answer, [3, 3]) is None
    assert expected_scores((TokenLogprob("x", 0.0),), answer, [3]) is None


def test_combine_mean_and_agreement() -> None:
    assert combine([4]).mean == 4 and isinstance(combine([4]).mean, int)
    assert combine([4, 4, 3, 0]).mean == pytest.approx(2.75)
    assert combine([4, 4, 3, 0]).agreement == 0.5
    with pytest.raises(ValueError):
        combine([])


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "agents.scorer.samples",
            0,
            "agents.scorer.samples: Input should be greater than or equal to 1",
        ),
        (
            "agents.scorer.samples",
            -3,
            "agents.scorer.samples: Input should be greater than or equal",
        ),
        (
            "agents.scorer.samples",
            10**6,
            "agents.scorer.samples: Input should be less than or equal to 16",
        ),
        ("agents.scorer.samples", "many", "agents.scorer.samples: Input should be a valid integer"),
        ("agents.analyzer.samples", 3, "agents.analyzer.samples: only the scorer reads it"),
        ("agents.default.logprobs", True, "agents.default.logprobs: only the scorer reads it"),
    ],
)
def test_invalid_sampling_options_are_refused_at_load(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings(None, **{key: value})
    assert message in str(error.value)


# -- the offline judge --------------------------------------------------------------------------


def scorer_messages(output: str) -> list[dict[str, Any]]:
    criteria = [
        {"id": "A1", "text": RUBRIC["anchor_rubrics"][0]["text"], "kind": "requirement"},
        {"id": "R1", "text": RUBRIC["adaptive_rubrics"][0]["text"], "kind": "requirement"},
    ]
    rollout = {"input": "What is 2+2?", "output": output, "supplemental_context": "4"}
    return [
        {"role": "system", "content": "judge"},
        {
            "role": "user",
            "content": data_message("scorer", {"criteria": criteria, "rollout": rollout}),
        },
    ]


def test_offline_logprobs_are_the_seeded_doubt_and_read_back() -> None:
    sampler = VerdictSampler(seed=7)
    messages = scorer_messages("2 + 2 = 4. The answer is 4.")
    reply = sampler.reply(messages, temperature=0.0, logprobs=True, top_logprobs=10)
    assert reply is not None and reply.logprobs is not None
    assert "".join(t["token"] for t in reply.logprobs) == reply.content
    answer = json.loads(reply.content)["verdicts"]
    tokens = parse_logprobs({"content": reply.logprobs})
    assert tokens is not None
    expected = expected_scores(tokens, reply.content, [v["score"] for v in answer])
    assert expected is not None
    for verdict, value in zip(answer, expected, strict=True):
        text = {
            "A1": RUBRIC["anchor_rubrics"][0]["text"],
            "R1": RUBRIC["adaptive_rubrics"][0]["text"],
        }[verdict["id"]]
        distribution = sampler.distribution(
            verdict["id"], text, "2 + 2 = 4. The answer is 4.", verdict["score"]
        )
        assert max(distribution, key=lambda s: distribution[s]) == verdict["score"]
        assert value == pytest.approx(sum(s * p for s, p in distribution.items()))
        assert abs(value - verdict["score"]) < DOUBT_MAX
    # Temperature 0, no logprobs: the plain offline judge answers.
    assert sampler.reply(messages, temperature=0.0, logprobs=False, top_logprobs=0) is None


def test_offline_samples_are_seeded_per_identical_request() -> None:
    messages = scorer_messages("The answer is 4.")

    def draws(seed: int, k: int) -> list[str]:
        sampler = VerdictSampler(seed)
        return [
            reply.content
            for _ in range(k)
            if (reply := sampler.reply(messages, 1.0, False, 0)) is not None
        ]

    first = draws(3, 40)
    assert first == draws(3, 40)  # the i-th identical request gets the i-th draw
    assert len(set(first)) > 1  # and the draws differ
    scores = [json.loads(c)["verdicts"][0]["score"] for c in first]
    mode = max(set(scores), key=scores.count)
    assert scores.count(mode) > len(scores) / 2
    assert math.isclose(sum(scores) / len(scores), mode, abs_tol=DOUBT_MAX + 0.2)


def test_offline_judge_samples_through_the_app(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        **RUBRIC,
        **{
            "agents.scorer.samples": 4,
            "agents.scorer.temperature": 1.0,
            "agents.scorer.logprobs": True,
        },
    )
    with serve(settings) as client:
        result = score(client, "2 + 2 = 4 because 2 and 2 make 4.")
        counters = client.get("/healthz").json()["counters"]
    assert result["status"] == "scored"
    assert counters["logprobs_used"] == 4
    for criterion in result["breakdown"]:
        assert len(criterion["samples"]) == 4
        assert criterion["from_logprobs"] == 4
        assert 0 <= criterion["verdict"] <= 4


# -- the simulator's figure ---------------------------------------------------------------------


def test_policy_groups_answer_one_task_per_group() -> None:
    planned = Policy(seed=1, per_step=12, total_steps=1, learning_rate=0.0, group_size=4).rollouts(
        0, {"anchors": [], "adaptive": []}
    )
    inputs = [p.rollout.input for p in planned]
    assert [len(set(inputs[i : i + 4])) for i in range(0, 12, 4)] == [1, 1, 1]
    assert len(set(inputs)) == 3
    # Group size 1 keeps the one-task-a-rollout stream of earlier runs of a seed.
    single = Policy(seed=1, per_step=12, total_steps=1, learning_rate=0.0)
    assert len({p.rollout.input for p in single.rollouts(0, {})}) > 3


def test_zero_variance_share_counts_groups_with_equal_rewards() -> None:
    def rollout(prompt: str, reward: float | None) -> RolloutResult:
        return RolloutResult(
            rollout_id=f"{prompt}{reward}",
            behaviour="correct",
            reward=reward,
            status="scored" if reward is not None else "unscored",
            rubric_version=1,
            prompt=prompt,
        )

    rollouts = [
        rollout("a", 1.0),
        rollout("a", 1.0),
        rollout("a", None),  # zero variance
        rollout("b", 1.0),
        rollout("b", 0.75),  # varies
        rollout("c", 0.5),  # one: no group
        rollout("d", 0.5),
        rollout("d", 0.5 + 1e-12),
    ]  # equal
    assert zero_variance(rollouts) == {"groups": 3, "zero_variance": 2, "share": 2 / 3}
    assert zero_variance([])["share"] is None


def test_offline_server_returns_logprobs_over_http(tmp_path: Path) -> None:
    app = create_llm_app(offline_responder(FaultProfile(seed=5)))
    with serve_in_thread(app) as url:
        settings = make_settings(
            tmp_path,
            **RUBRIC,
            **{
                "client.default.base_url": f"{url}/v1",
                "client.default.api_key": "k",
                "agents.scorer.logprobs": True,
            },
        )
        with serve(settings) as client:
            result = score(client, "2 + 2 = 4 because 2 and 2 make 4.")
            counters = client.get("/healthz").json()["counters"]
    assert counters["logprobs_used"] == 1
    sampler = VerdictSampler(seed=5)
    for criterion in result["breakdown"]:
        assert criterion["from_logprobs"] == 1
        plain = round(criterion["verdict"])
        distribution = sampler.distribution(
            criterion["id"], criterion["text"], "2 + 2 = 4 because 2 and 2 make 4.", plain
        )
        assert criterion["verdict"] == pytest.approx(sum(s * p for s, p in distribution.items()))
