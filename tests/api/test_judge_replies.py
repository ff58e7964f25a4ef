"""Hostile judge replies through the real app: each ends as one rollout's typed ``unscored``
(or a clipped, storable verdict), never a 500 or a failed batch.

The judge is the fake LLM server (real HTTP); raw bodies (``Reply.body``) carry what its
JSON encoder would refuse (NaN, a lone surrogate escape at the HTTP level).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amaris.agents.prompts import parse_data_message
from amaris.offline.judge import respond
from amaris.rubric.model import Criterion, RubricVersion
from amaris.scoring.judge_protocol import MAX_REASON_CHARS, JudgeVerdicts, Verdict, check_ids
from amaris.settings import Settings
from amaris.sim.judge_server import Reply
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, verdicts_with_logprobs
from tests.support.settings import llm_settings
from tests.support.testclient import TestClient

RUBRIC: dict[str, Any] = {
    "anchor_rubrics": [{"text": "The response gives the correct final answer.", "weight": 1.0}],
    "adaptive_rubrics": [{"text": "The response explains its reasoning steps.", "weight": 1.0}],
}
"""A1 and R1, weight 1 each."""

DEADLINE_S = 60.0
"""Watchdog of a call that must not stall (never part of an assertion)."""


def settings_for(tmp_path: Path, fake: FakeLLM, **overrides: Any) -> Settings:
    return llm_settings(tmp_path, fake, **RUBRIC, **{"gateway.max_attempts": 1, **overrides})


def rollout(rid: str = "r1", output: str = "4") -> dict[str, Any]:
    return {"id": rid, "input": "What is 2+2?", "output": output, "supplemental_context": "4"}


def score(client: TestClient, output: str = "4") -> dict[str, Any]:
    r = client.post("/score", json={"rollout": rollout(output=output), "include_breakdown": True})
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def verdicts_json(reason: str = "ok", **extra: Any) -> str:
    return json.dumps(
        {
            "verdicts": [
                {"id": "A1", "reason": reason, "score": 4},
                {"id": "R1", "reason": "fine", "score": 2},
            ],
            **extra,
        }
    )


def judged_output(request: dict[str, Any]) -> str:
    output: str = parse_data_message(request["messages"][1]["content"])["rollout"]["output"]
    return output


def raw_completion(content: str, logprobs: list[dict[str, Any]] | None = None) -> bytes:
    """A chat-completion body as a server may send it (NaN and Infinity allowed)."""
    choice: dict[str, Any] = {"message": {"role": "assistant", "content": content}}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return json.dumps({"choices": [choice]}).encode()


def unscored_kind(result: dict[str, Any]) -> str:
    assert result["status"] == "unscored", result
    assert result["score"] is None
    kind: str = result["reason"].split(":", 1)[0]
    return kind


# -- size -----------------------------------------------------------------------------------


def test_reply_past_max_response_bytes_is_unscored_and_not_asked_again(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # A verdict whose reason is 1 MB: refused while read, not accepted whole.
    fake_llm.push(Reply(content=verdicts_json("x" * 1_000_000)))
    with serve(settings_for(tmp_path, fake_llm, **{"gateway.max_attempts": 3})) as client:
        result = score(client)
        counters = client.get("/healthz").json()["counters"]
        exported = client.get("/metrics").text
    assert unscored_kind(result) == "judge_oversize"
    assert 'amaris_unscored_total{reason="judge_oversize"} 1.0' in exported
    assert 'amaris_llm_oversize_total{agent="scorer",path="score"} 1.0' in exported
    assert "max_response_bytes" in result["reason"]
    assert counters["unscored.judge_oversize"] == 1
    assert len(fake_llm.requests) == 1


def test_long_reason_within_the_limit_is_clipped_not_refused(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.push(Reply(content=verdicts_json("y" * 100_000)))
    with serve(settings_for(tmp_path, fake_llm)) as client:
        result = score(client)
    assert result["status"] == "scored"
    reason = result["breakdown"][0]["reason"]
    assert reason == "y" * MAX_REASON_CHARS + "..."


def test_sixty_thousand_verdicts_are_refused_unread(tmp_path: Path, fake_llm: FakeLLM) -> None:
    items = [{"id": f"X{i}", "reason": "", "score": 1} for i in range(60_000)]
    fake_llm.push(Reply(content=json.dumps({"verdicts": items})))
    with serve(settings_for(tmp_path, fake_llm)) as client:
        result = score(client)
    assert unscored_kind(result) == "judge_oversize"


def test_verdict_ids_are_checked_in_linear_time() -> None:
    # 200,000 copies of one id: a quadratic count takes minutes, a counter milliseconds.
    rubric = RubricVersion(
        version=1,
        origin="config",
        anchors=(Criterion(id="A1", text="correct", weight=1.0, is_anchor=True),),
        adaptive=(Criterion(id="R1", text="explains", weight=1.0, is_anchor=False),),
    )
    reply = JudgeVerdicts(verdicts=[Verdict(id="A1", score=4)] * 200_000)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            check_ids(rubric)(reply)
        except ValueError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE_S)  # watchdog only
    assert not worker.is_alive(), "the verdict check did not end"
    assert "missing ['R1']" in str(outcome[0])
    assert "duplicated ['A1']" in str(outcome[0])
    assert len(str(outcome[0])) < 400


# -- parsing ------------------------------------------------------------------------------


def test_long_broken_json_is_not_repaired(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # 1.5 MB, one brace short: json_repair would mend it (a long stall of the event loop).
    broken = verdicts_json("z" * 1_500_000)[:-1]
    fake_llm.default = lambda body: Reply(content=broken)
    settings = settings_for(tmp_path, fake_llm, **{"agents.scorer.max_response_bytes": 4_000_000})
    with serve(settings) as client:
        result = score(client)
    assert unscored_kind(result) == "judge_invalid"
    assert "too long to repair" in result["reason"]


def test_short_broken_json_is_still_repaired(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content=verdicts_json()[:-1]))
    with serve(settings_for(tmp_path, fake_llm)) as client:
        result = score(client)
        counters = client.get("/healthz").json()
    assert result["status"] == "scored"
    assert result["score"] == 0.75
    assert counters["status"] == "ok"


@pytest.mark.parametrize(
    "content",
    ["[" * 100_000, '{"verdicts": ' + "[" * 100_000, '{"a": 1' + "0" * 5000 + "}"],
    ids=["brackets", "nested-verdicts", "long-integer"],
)
def test_answer_that_cannot_be_read_is_unscored_not_a_500(
    tmp_path: Path, fake_llm: FakeLLM, content: str
) -> None:
    fake_llm.default = lambda body: Reply(content=content)
    with serve(settings_for(tmp_path, fake_llm)) as client:
        result = score(client)
    assert unscored_kind(result) == "judge_invalid"


def test_body_nested_too_deep_is_unscored_not_a_500(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(body=b"[" * 100_000))
    with serve(settings_for(tmp_path, fake_llm)) as client:
        result = score(client)
    assert unscored_kind(result) == "judge_unavailable"
    assert "nests too deep" in result["reason"]


# -- logprobs -----------------------------------------------------------------------------


def tampered_logprobs(value: float) -> bytes:
    """A reply whose first score position has one alternative with logprob ``value``."""
    reply = verdicts_with_logprobs(("A1", {4: 0.75, 3: 0.25}), ("R1", {2: 1.0}))
    assert reply.content is not None and reply.logprobs is not None
    tokens = json.loads(json.dumps(reply.logprobs))
    position = next(t for t in tokens if len(t["top_logprobs"]) > 1)
    position["top_logprobs"][1]["logprob"] = value
    return raw_completion(reply.content, tokens)


BAD_LOGPROBS = [float("nan"), float("inf"), 1000.0]


@pytest.mark.parametrize("value", BAD_LOGPROBS, ids=["nan", "infinity", "1000"])
def test_logprob_that_is_no_log_probability_is_unscored(
    tmp_path: Path, fake_llm: FakeLLM, value: float
) -> None:
    fake_llm.push(Reply(body=tampered_logprobs(value)))
    settings = settings_for(tmp_path, fake_llm, **{"agents.scorer.logprobs": True})
    with serve(settings) as client:
        result = score(client)
    assert unscored_kind(result) == "judge_invalid_logprobs"


def test_logprob_of_minus_infinity_is_a_probability_of_zero(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.push(Reply(body=tampered_logprobs(float("-inf"))))
    settings = settings_for(tmp_path, fake_llm, **{"agents.scorer.logprobs": True})
    with serve(settings) as client:
        result = score(client)
    assert result["status"] == "scored"
    assert result["breakdown"][0]["verdict"] == 4.0


def bad_for(output: str) -> Callable[[dict[str, Any]], Reply]:
    """The offline judge's reply, and NaN logprobs for the rollout whose output is ``output``."""

    def judge(request: dict[str, Any]) -> Reply:
        if judged_output(request) == output:
            return Reply(body=tampered_logprobs(float("nan")))
        return Reply(content=respond(request["messages"]))

    return judge


def test_one_bad_reply_leaves_one_batch_item_unscored(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = bad_for("BAD")
    settings = settings_for(tmp_path, fake_llm, **{"agents.scorer.logprobs": True})
    items = [
        {"rollout": rollout(f"r{i}", out), "metadata": {"current_step": 1}}
        for i, out in enumerate(["4", "BAD", "5"])
    ]
    with serve(settings) as client:
        r = client.post("/batch_score", json={"items": items})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["scored", "unscored", "scored"]
    assert results[1]["reason"].startswith("judge_invalid_logprobs: ")
    assert results[0]["score"] is not None and results[2]["score"] is not None


def get_reward_body(*responses: str) -> dict[str, Any]:
    prompt = "What is 2+2?"
    return {
        "query": [prompt + " " + out for out in responses],
        "prompts": [prompt] * len(responses),
        "labels": ["4"] * len(responses),
    }


def test_one_bad_reply_in_get_reward_is_that_samples_only(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.default = bad_for(" BAD")
    settings = settings_for(
        tmp_path,
        fake_llm,
        **{
            "agents.scorer.logprobs": True,
            "scoring.on_failure": "neutral",
            "scoring.neutral_score": 0.5,
        },
    )
    with serve(settings) as client:
        r = client.post("/get_reward", json=get_reward_body("4", "BAD", "5"))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["statuses"] == ["scored", "unscored", "scored"]
    assert answer["extra_logs"]["amaris_unscored"] == [0.0, 1.0, 0.0]
    assert answer["rewards"][1] == 0.5


def test_one_bad_reply_in_get_reward_is_a_503_naming_it(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = bad_for(" BAD")
    settings = settings_for(tmp_path, fake_llm, **{"agents.scorer.logprobs": True})
    with serve(settings) as client:
        r = client.post("/get_reward", json=get_reward_body("4", "BAD"))
    assert r.status_code == 503, r.text
    answer = r.json()
    assert answer["statuses"] == ["scored", "unscored"]
    assert [d["field"] for d in answer["detail"]] == ["query[1]"]
    assert answer["detail"][0]["message"].startswith("judge_invalid_logprobs: ")


# -- storable text ------------------------------------------------------------------------

SURROGATE_REASON = verdicts_json().replace('"ok"', '"bad \\ud800 text"')
"""A verdict whose reason is the JSON escape of a lone surrogate."""


def test_lone_surrogate_in_a_reason_is_replaced_and_the_rollout_logged(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.push(Reply(content=SURROGATE_REASON))
    with serve(settings_for(tmp_path, fake_llm)) as client:
        result = score(client)
        records = client.get("/steps/0/rollouts").json()["records"]
    assert result["status"] == "scored"
    assert result["breakdown"][0]["reason"] == "bad \ufffd text"
    assert [r["verdicts"][0]["reason"] for r in records] == ["bad \ufffd text"]


def test_lone_surrogate_in_get_reward_is_replaced(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content=SURROGATE_REASON))
    with serve(settings_for(tmp_path, fake_llm)) as client:
        r = client.post("/get_reward", json=get_reward_body("4"))
    assert r.status_code == 200, r.text
    assert r.json()["statuses"] == ["scored"]


def test_lone_surrogate_in_an_error_body_is_replaced(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # A JSON string for a body: the SDK's error message quotes it as it is.
    fake_llm.push(Reply(status=400, body=b'"no \\udfff way"'))
    settings = settings_for(tmp_path, fake_llm, **{"logging.path": str(tmp_path / "logs")})
    with serve(settings) as client:
        result = score(client)
        records = client.get("/steps/0/rollouts").json()["records"]
    assert unscored_kind(result) == "judge_unavailable"
    assert "no \ufffd way" in result["reason"]
    assert records[0]["reason"] == result["reason"]
