"""Reasoning models: think blocks and reasoning fields kept out of the answer, reasoning
tokens counted, cut or all-reasoning replies and context overflows as typed unscored
results (through real HTTP, the fake LLM)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amaris.llm.gateway import LLMContextOverflowError, LLMTruncatedError
from amaris.llm.providers import parse_completion
from amaris.llm.reasoning import split_reasoning
from amaris.sim.judge_server import Reply
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.gateway import EXPECTED, GOOD, MESSAGES, Verdict, call_log, open_gateway
from tests.support.settings import llm_settings

BODY = {
    "rollout": {"id": "r1", "input": "What is 2+2?", "output": "4", "supplemental_context": "4"}
}
DRAFT = '{"score": 0.0, "reason": "draft"}'
"""JSON-looking reasoning: a lenient parser would take it for the answer."""
DRAFT_VERDICTS = json.dumps({"verdicts": [{"id": "A1", "score": 0, "reason": "draft"}]})
OVERFLOW = (
    "This model's maximum context length is 8192 tokens. However, you requested "
    "9000 tokens (8800 in the messages, 200 in the completion)."
)


@pytest.mark.parametrize(
    ("content", "answer", "reasoning"),
    [
        (GOOD, GOOD, None),
        (f"<think>{DRAFT}</think>\n{GOOD}", GOOD, DRAFT),
        (f"<think>a</think><THINK>b</THINK> {GOOD}", GOOD, "a\nb"),
        (f"{DRAFT}\n</think>\n\n{GOOD}", GOOD, DRAFT),  # the template opened the block
        (f"<think>\nstill thinking {DRAFT}", "", f"still thinking {DRAFT}"),  # cut while thinking
        ("<think></think>", "", ""),
    ],
)
def test_split_reasoning(content: str, answer: str, reasoning: str | None) -> None:
    assert split_reasoning(content) == (answer, reasoning)


def test_parse_completion_reads_reasoning_finish_reason_and_reasoning_tokens() -> None:
    raw = {
        "choices": [
            {"message": {"content": GOOD, "reasoning_content": "hmm"}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 7,
            "completion_tokens_details": {"reasoning_tokens": 3},
        },
    }
    parsed = parse_completion(json.dumps(raw).encode())
    assert (parsed.content, parsed.reasoning, parsed.finish_reason) == (GOOD, "hmm", "stop")
    assert (parsed.prompt_tokens, parsed.completion_tokens, parsed.reasoning_tokens) == (10, 7, 3)
    raw["choices"][0]["message"] = {"content": GOOD, "reasoning": "openrouter"}
    assert parse_completion(json.dumps(raw).encode()).reasoning == "openrouter"


async def test_think_block_is_logged_and_counted_not_parsed(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.push(
        Reply(content=f"<think>\n{DRAFT}\n</think>\n\n{GOOD}", reasoning_tokens=12),
        Reply(content=GOOD, reasoning="first I check the sum", reasoning_tokens=5),
    )
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
        stats = gateway.stats.copy()
        usage = gateway.ledger.totals()
    assert len(fake_llm.requests) == 2  # no re-ask: the draft was never parsed
    assert sum(u.reasoning_tokens for u in usage.values()) == 17
    assert stats["scorer.invalid_output"] == 0 and stats["scorer.truncated"] == 0
    first, second = call_log(tmp_path)
    assert first["reasoning"] == DRAFT and first["reasoning_tokens"] == 12
    assert second["reasoning"] == "first I check the sum" and second["reasoning_chars"] == 21
    assert first["finish_reason"] == second["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "reply",
    [
        Reply(content=GOOD[:-5], finish_reason="length"),
        Reply(content=GOOD, finish_reason="length"),  # even when it happens to parse
        Reply(content=f"<think>\nI need to weigh {DRAFT}", finish_reason="length"),
        Reply(content="", reasoning="thought it all through", finish_reason="stop"),
        Reply(content="<think>thought it all through</think>", finish_reason="stop"),
    ],
    ids=["cut-json", "cut-parsable", "cut-thinking", "reasoning-field-only", "think-only"],
)
async def test_cut_or_all_reasoning_replies_are_truncated_not_reasked(
    tmp_path: Path, fake_llm: FakeLLM, reply: Reply
) -> None:
    fake_llm.push(reply)
    async with open_gateway(tmp_path, fake_llm) as gateway:
        with pytest.raises(LLMTruncatedError):
            await gateway.structured("scorer", MESSAGES, Verdict)
        stats = gateway.stats.copy()
    assert len(fake_llm.requests) == 1
    assert stats["scorer.truncated"] == 1 and stats["scorer.invalid_output"] == 0


async def test_context_overflow_is_typed_and_not_retried(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(status=400, content=OVERFLOW))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        with pytest.raises(LLMContextOverflowError):
            await gateway.structured("scorer", MESSAGES, Verdict)
    assert len(fake_llm.requests) == 1
    assert call_log(tmp_path)[0]["outcome"] == "context_overflow"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (
            Reply(content='{"verdicts": [{"id": "A1", "score": 4, "reas', finish_reason="length"),
            "judge_truncated",
        ),
        (
            Reply(content="", reasoning="A1 looks right, so 4", finish_reason="stop"),
            "judge_truncated",
        ),
        # Unterminated, with a draft verdict in it: parsing it would fabricate a reward.
        (Reply(content=f"<think>I would say {DRAFT_VERDICTS}"), "judge_truncated"),
        (Reply(status=400, content=OVERFLOW), "judge_context_overflow"),
        (Reply(content="no JSON here"), "judge_invalid"),
    ],
)
def test_score_reports_truncation_and_overflow_as_unscored_never_zero(
    tmp_path: Path, fake_llm: FakeLLM, reply: Reply, reason: str
) -> None:
    settings = llm_settings(tmp_path, fake_llm, **{"gateway.reask_on_invalid": False})
    fake_llm.push(reply)
    with serve(settings) as client:
        result = client.post("/score", json=BODY).json()
        counters = client.get("/healthz").json()["counters"]
        metrics = client.get("/metrics").text
    assert result["status"] == "unscored" and result["score"] is None
    assert result["reason"].startswith(f"{reason}: ")
    assert counters == {"unscored": 1, f"unscored.{reason}": 1}
    assert f'amaris_unscored_total{{reason="{reason}"}} 1.0' in metrics


def test_score_reads_the_answer_after_the_think_block(tmp_path: Path, fake_llm: FakeLLM) -> None:
    answer = json.dumps({"verdicts": [{"id": "A1", "score": 4, "reason": "matches"}]})
    fake_llm.push(Reply(content=f"<think>{DRAFT_VERDICTS}</think>{answer}", reasoning_tokens=9))
    with serve(llm_settings(tmp_path, fake_llm)) as client:
        result = client.post("/score", json=BODY).json()
        metrics = client.get("/metrics").text
    assert result["status"] == "scored" and result["score"] == 1.0
    assert len(fake_llm.requests) == 1  # parsed at once: no corrective re-ask
    assert 'amaris_llm_tokens_total{agent="scorer",kind="reasoning",model="gpt-4o-mini"} 9.0' in (
        metrics
    )


SPLIT_IN_CHILD = (
    "import json, sys; from amaris.llm.reasoning import split_reasoning; "
    "print(json.dumps(split_reasoning(json.load(sys.stdin))))"
)
"""``split_reasoning`` of the JSON string on stdin, printed as JSON."""


@pytest.mark.parametrize(
    "content, expected",
    [
        ("<think>" * 40_000, ("", "<think>" * 39_999)),
        ("</think>" * 40_000, ("", "</think>" * 39_999)),
        ("<THINK>" * 20_000 + "</think>{}", ("{}", "<THINK>" * 19_999)),
    ],
    ids=["opening-tags", "closing-tags", "one-long-block"],
)
def test_think_tags_by_the_hundred_thousand_are_split_in_linear_time(
    content: str, expected: tuple[str, str]
) -> None:
    # A backtracking pattern would stall on 100 KB of "<think>", holding the interpreter
    # lock throughout: only a watchdog in another process can stop it.
    child = subprocess.run(
        [sys.executable, "-c", SPLIT_IN_CHILD],
        input=json.dumps(content),
        capture_output=True,
        text=True,
        timeout=120.0,  # watchdog only (the child imports amaris first)
        check=True,
    )
    assert tuple(json.loads(child.stdout)) == expected
