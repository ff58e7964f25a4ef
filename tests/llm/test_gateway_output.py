"""LLMGateway through real HTTP: JSON repair, schema/check validation, the corrective re-ask."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from amaris.llm.gateway import LLMOutputError, LLMUnavailableError
from amaris.sim.judge_server import Reply
from tests.support.fake_llm import FakeLLM
from tests.support.gateway import EXPECTED, GOOD, MESSAGES, Verdict, call_log, open_gateway

# --- repairable output: no re-ask -----------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        '{"score": 0.75, "reason": "correct",}',
        "{'score': 0.75, 'reason': 'correct'}",
        '```json\n{"score": 0.75, "reason": "correct"}\n```',
        'Here is my verdict:\n{"score": 0.75, "reason": "correct"}',
        '{"score": 0.75, "reason": "correct"',
    ],
)
async def test_repairable_json_is_parsed_without_reask(
    tmp_path: Path, fake_llm: FakeLLM, content: str
) -> None:
    fake_llm.push(Reply(content=content), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("analyzer", MESSAGES, Verdict) == EXPECTED
        stats = gateway.stats.copy()
    assert len(fake_llm.requests) == 1
    assert stats["analyzer.repaired_json"] == 1
    assert stats["analyzer.invalid_output"] == 0


async def test_clean_json_is_not_counted_as_repaired(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content=GOOD), Reply(content="  " + GOOD + "\n"))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        for _ in range(2):
            assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
        stats = gateway.stats.copy()
    assert stats["scorer.repaired_json"] == 0
    assert stats["scorer.calls"] == 2


# --- invalid output: one corrective re-ask --------------------------------------------------


def _reask_messages(fake: FakeLLM, bad: str) -> list[dict[str, str]]:
    """The re-ask request's messages, checked against the original conversation."""
    assert len(fake.requests) >= 2
    messages: list[dict[str, str]] = fake.requests[1]["messages"]
    assert messages[: len(MESSAGES)] == MESSAGES
    assert messages[len(MESSAGES)] == {"role": "assistant", "content": bad}
    assert messages[-1]["role"] == "user"
    assert len(messages) == len(MESSAGES) + 2
    return messages


@pytest.mark.parametrize(
    ("bad", "quoted"),
    [
        ('{"score": 1.5, "reason": "too good"}', "less than or equal to 1"),
        ('{"score": 0.5}', "reason"),
        ('{"score": "high", "reason": "x"}', "valid number"),
        ("I am unable to judge this answer.", "not a JSON object"),
        ("", "not a JSON object"),
        ("[0.5, 0.7]", "not a JSON object"),
    ],
)
async def test_invalid_output_reasks_once(
    tmp_path: Path, fake_llm: FakeLLM, bad: str, quoted: str
) -> None:
    fake_llm.push(Reply(content=bad), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict, step=2) == EXPECTED
        stats = gateway.stats.copy()
    assert len(fake_llm.requests) == 2
    correction = _reask_messages(fake_llm, bad)[-1]["content"]
    assert correction.startswith("Your reply was invalid: ")
    assert quoted in correction
    assert "JSON object" in correction
    assert stats["scorer.invalid_output"] == 1
    assert stats["scorer.calls"] == 2
    # The re-ask is the same request otherwise (model, options).
    first, second = fake_llm.requests
    assert {k: v for k, v in first.items() if k != "messages"} == {
        k: v for k, v in second.items() if k != "messages"
    }
    assert [(x["step"], x["attempt"], x["reask"]) for x in call_log(tmp_path)] == [
        (2, 1, False),
        (2, 1, True),
    ]


async def test_failing_check_reasks_with_its_message(tmp_path: Path, fake_llm: FakeLLM) -> None:
    def check(verdict: Verdict) -> None:
        if not verdict.reason.strip():
            raise ValueError("reason must not be empty")

    bad = '{"score": 0.75, "reason": "  "}'
    fake_llm.push(Reply(content=bad), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict, check=check) == EXPECTED
    assert "reason must not be empty" in _reask_messages(fake_llm, bad)[-1]["content"]


async def test_invalid_after_reask_raises(tmp_path: Path, fake_llm: FakeLLM) -> None:
    bad = '{"score": 2, "reason": "x"}'
    fake_llm.push(Reply(content=bad), Reply(content="still not json"), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        with pytest.raises(LLMOutputError, match="invalid output after re-ask") as info:
            await gateway.structured("updater", MESSAGES, Verdict)
        stats = gateway.stats.copy()
    assert "not a JSON object" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    assert len(fake_llm.requests) == 2
    _reask_messages(fake_llm, bad)
    assert stats["updater.invalid_output"] == 2


async def test_check_failing_after_reask_raises(tmp_path: Path, fake_llm: FakeLLM) -> None:
    def check(verdict: Verdict) -> None:
        raise ValueError("always wrong")

    fake_llm.push(Reply(content=GOOD), Reply(content=GOOD), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        with pytest.raises(LLMOutputError, match="always wrong"):
            await gateway.structured("scorer", MESSAGES, Verdict, check=check)
    assert len(fake_llm.requests) == 2


async def test_reask_disabled(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content='{"score": 3, "reason": "x"}'), Reply(content=GOOD))
    overrides = {"gateway.reask_on_invalid": False}
    async with open_gateway(tmp_path, fake_llm, **overrides) as gateway:
        with pytest.raises(LLMOutputError, match="less than or equal to 1") as info:
            await gateway.structured("scorer", MESSAGES, Verdict)
    assert isinstance(info.value.__cause__, ValidationError)
    assert "after re-ask" not in str(info.value)
    assert len(fake_llm.requests) == 1


async def test_reask_quotes_at_most_4000_chars(tmp_path: Path, fake_llm: FakeLLM) -> None:
    bad = "no verdict " * 1000
    fake_llm.push(Reply(content=bad), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
    _reask_messages(fake_llm, bad[:4000])


async def test_reask_has_its_own_attempt_budget(tmp_path: Path, fake_llm: FakeLLM) -> None:
    bad = '{"score": -1, "reason": "x"}'
    fake_llm.push(Reply(status=503), Reply(content=bad), Reply(status=500), Reply(content=GOOD))
    async with open_gateway(tmp_path, fake_llm, **{"gateway.max_attempts": 2}) as gateway:
        assert await gateway.structured("scorer", MESSAGES, Verdict) == EXPECTED
    assert len(fake_llm.requests) == 4
    assert fake_llm.requests[2]["messages"] == fake_llm.requests[3]["messages"]
    assert fake_llm.requests[3]["messages"][len(MESSAGES)]["content"] == bad
    assert [(x["attempt"], x["reask"], x["outcome"]) for x in call_log(tmp_path)] == [
        (1, False, "transient_error"),
        (2, False, "ok"),
        (1, True, "transient_error"),
        (2, True, "ok"),
    ]


async def test_at_most_twice_max_attempts_requests(tmp_path: Path, fake_llm: FakeLLM) -> None:
    bad = '{"score": -1, "reason": "x"}'
    fake_llm.push(
        Reply(status=503), Reply(content=bad), Reply(status=503), Reply(content=bad), Reply(GOOD)
    )
    async with open_gateway(tmp_path, fake_llm, **{"gateway.max_attempts": 2}) as gateway:
        with pytest.raises(LLMOutputError):
            await gateway.structured("scorer", MESSAGES, Verdict)
    assert len(fake_llm.requests) == 4


async def test_reask_unavailable_raises_unavailable(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.push(Reply(content="nope"), Reply(status=503), Reply(status=503), Reply(GOOD))
    async with open_gateway(tmp_path, fake_llm, **{"gateway.max_attempts": 2}) as gateway:
        with pytest.raises(LLMUnavailableError, match="2 attempts failed"):
            await gateway.structured("scorer", MESSAGES, Verdict)
    assert len(fake_llm.requests) == 3
