"""The LLM gateway (amaris/llm/gateway.py) with the endpoint faked at the gateway seam
(tests/support/scripted_llm.py); no conftest fixture, so its mutation run
(``bench/evaluations/mutation.py gateway``) stays cheap per mutant.

What a user sees: the corrective re-ask and its limits, cut replies, the counters, the
context window and prompt budget, the schema asked for, the step's wall time in the ledger,
the registries the service's two gateways share, and closing.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from amaris.llm.budget import ContextWindows
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import (
    INLINE_PARSE_CHARS,
    LLMGateway,
    LLMOutputError,
    LLMTruncatedError,
    LLMUnavailableError,
)
from amaris.llm.ledger import TokenLedger
from amaris.llm.output_mode import OutputModes
from amaris.llm.schema import strict_schema
from tests.support.scripted_llm import (
    GOOD,
    MESSAGES,
    MODEL,
    ScriptedProvider,
    answer,
    settings,
    status,
)


class Reply(BaseModel):
    value: int
    reason: str


def open_gateway(tmp_path: Path, endpoint: ScriptedProvider, **overrides: Any) -> LLMGateway:
    return LLMGateway(settings(**overrides), {"scorer": endpoint}, CallLog(tmp_path / "logs"))


async def lines(tmp_path: Path, gateway: LLMGateway) -> list[dict[str, Any]]:
    await gateway.close()
    path = tmp_path / "logs" / "llm_calls.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def reask_of(endpoint: ScriptedProvider) -> list[dict[str, str]]:
    """The messages of the last request, past the original ones."""
    return endpoint.calls[-1].messages[len(MESSAGES) :]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("not json at all " * 400, "not a json object"),  # 6400 characters (ValueError)
        ('{"value": "seven", "reason": "ok"}', "value"),  # not the schema (ValidationError)
    ],
    ids=["not-json", "not-the-schema"],
)
async def test_invalid_output_is_asked_again_once_quoting_it(
    tmp_path: Path, bad: str, why: str
) -> None:
    endpoint = ScriptedProvider([answer(bad), answer()])
    gateway = open_gateway(tmp_path, endpoint)
    assert await gateway.structured("scorer", MESSAGES, Reply) == Reply(value=7, reason="ok")
    assert len(endpoint.calls) == 2
    assert endpoint.calls[0].messages == MESSAGES
    quoted, ask = reask_of(endpoint)
    assert quoted == {"role": "assistant", "content": bad[:4000]}
    assert ask["role"] == "user" and ask["content"].startswith("Your reply was invalid: ")
    assert ask["content"].endswith("Reply again with only the JSON object in the required format.")
    assert why in ask["content"].casefold()
    assert gateway.stats["scorer.invalid_output"] == 1 and gateway.stats["scorer.calls"] == 2
    records = await lines(tmp_path, gateway)
    assert [(r["reask"], r["attempt"]) for r in records] == [(False, 1), (True, 1)]


async def test_a_failing_check_is_asked_again_with_its_message(tmp_path: Path) -> None:
    def check(reply: Reply) -> None:
        if reply.value != 8:
            raise ValueError("value must be 8")

    endpoint = ScriptedProvider([answer(), answer(json.dumps({"value": 8, "reason": "ok"}))])
    gateway = open_gateway(tmp_path, endpoint)
    assert (await gateway.structured("scorer", MESSAGES, Reply, check=check)).value == 8
    assert "value must be 8" in reask_of(endpoint)[1]["content"]
    await gateway.close()


async def test_invalid_output_after_the_reask_is_an_output_error(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([answer("nope"), answer("still nope"), answer()])
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMOutputError, match=r"^scorer: invalid output after re-ask: "):
        await gateway.structured("scorer", MESSAGES, Reply)
    assert len(endpoint.calls) == 2
    assert gateway.stats["scorer.invalid_output"] == 2
    await gateway.close()


async def test_without_reask_invalid_output_is_an_output_error_at_once(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([answer("nope"), answer()])
    gateway = open_gateway(tmp_path, endpoint, **{"gateway.reask_on_invalid": False})
    with pytest.raises(LLMOutputError, match=r"^scorer: invalid output: "):
        await gateway.structured("scorer", MESSAGES, Reply)
    assert len(endpoint.calls) == 1
    await gateway.close()


async def test_the_reask_has_its_own_attempts(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([status(503), answer("nope"), status(503), answer()])
    gateway = open_gateway(tmp_path, endpoint, **{"gateway.max_attempts": 2})
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    records = await lines(tmp_path, gateway)
    assert [(r["reask"], r["attempt"]) for r in records] == [
        (False, 1),
        (False, 2),
        (True, 1),
        (True, 2),
    ]


async def test_an_unavailable_reask_is_unavailable(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([answer("nope"), status(404, "gone")])
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMUnavailableError, match="gone"):
        await gateway.structured("scorer", MESSAGES, Reply)
    await gateway.close()


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            answer(GOOD[:5], finish_reason="length", reasoning="abc"),
            "scorer: reply cut by max_tokens (finish_reason: length); "
            "5 answer characters after 3 of reasoning",
        ),
        (
            answer(GOOD[:5], finish_reason="length"),
            "scorer: reply cut by max_tokens (finish_reason: length); "
            "5 answer characters after 0 of reasoning",
        ),
        (
            answer(" ", reasoning="abcd"),
            "scorer: reply reasoning and no answer; 1 answer characters after 4 of reasoning",
        ),
    ],
)
async def test_a_cut_reply_is_not_asked_again(tmp_path: Path, reply: Any, message: str) -> None:
    endpoint = ScriptedProvider([reply, answer()])
    gateway = open_gateway(tmp_path, endpoint)
    with pytest.raises(LLMTruncatedError) as raised:
        await gateway.structured("scorer", MESSAGES, Reply)
    assert str(raised.value) == message
    assert len(endpoint.calls) == 1
    assert gateway.stats["scorer.truncated"] == 1
    assert "scorer.invalid_output" not in gateway.stats
    await gateway.close()


async def test_repaired_json_is_counted_and_clean_json_is_not(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([answer(), answer("```json\n" + GOOD + "\n```")])
    gateway = open_gateway(tmp_path, endpoint)
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    assert "scorer.repaired_json" not in gateway.stats
    assert (await gateway.structured("scorer", MESSAGES, Reply)).value == 7
    assert gateway.stats["scorer.repaired_json"] == 1
    assert len(endpoint.calls) == 2
    await gateway.close()


async def test_a_long_answer_is_read_off_the_event_loop(tmp_path: Path) -> None:
    """A short JSON answer is read on the event loop; a long one (or one to repair) in a
    worker thread, so a judge's long reply never stalls the loop."""
    threads: list[int] = []

    def check(reply: Reply) -> None:
        threads.append(threading.get_ident())

    long = json.dumps({"value": 7, "reason": "x" * INLINE_PARSE_CHARS})
    endpoint = ScriptedProvider([answer(), answer(long), answer("```json\n" + GOOD + "\n```")])
    gateway = open_gateway(tmp_path, endpoint)
    for _ in range(3):
        await gateway.structured("scorer", MESSAGES, Reply, check=check)
    loop = threading.get_ident()
    assert [thread == loop for thread in threads] == [True, False, False]
    await gateway.close()


async def test_the_schema_asked_for_is_the_models_unless_given(tmp_path: Path) -> None:
    given = {"type": "object", "properties": {"value": {"type": "integer"}}}
    endpoint = ScriptedProvider([answer(), answer()])
    gateway = open_gateway(tmp_path, endpoint)
    await gateway.structured("scorer", MESSAGES, Reply)
    await gateway.structured("scorer", MESSAGES, Reply, json_schema=given)
    sent = [r.response_format["json_schema"] for r in endpoint.calls if r.response_format]
    assert sent == [
        {"name": "Reply", "strict": True, "schema": strict_schema(Reply)},
        {"name": "Reply", "strict": True, "schema": given},
    ]
    await gateway.close()


async def test_the_output_mode_of_an_agent(tmp_path: Path) -> None:
    online, offline = ScriptedProvider(), ScriptedProvider(offline=True)
    gateway = LLMGateway(settings(), {"scorer": online, "analyzer": offline}, CallLog(None))
    assert gateway.output_mode("scorer").mode == "json_schema"
    assert gateway.output_mode("analyzer").mode == "none"
    assert gateway.provider("analyzer") is offline
    await gateway.close()


async def test_the_context_window_is_configured_else_listed_once(tmp_path: Path) -> None:
    listing = ScriptedProvider(windows={MODEL: 10_000})
    configured = ScriptedProvider(windows={MODEL: 10_000})
    offline = ScriptedProvider(offline=True, windows={MODEL: 10_000})
    gateway = LLMGateway(
        settings(**{"agents.analyzer.context_window": 3000, "agents.scorer.max_tokens": 1000}),
        {"scorer": listing, "analyzer": configured, "summarizer": offline},
        CallLog(None),
    )
    assert await gateway.context_window("scorer") == 10_000
    assert await gateway.context_window("scorer") == 10_000
    assert listing.listed == 1
    assert await gateway.context_window("analyzer") == 3000 and configured.listed == 0
    assert await gateway.context_window("summarizer") is None and offline.listed == 0
    # the window less max_tokens; then scaled once the endpoint counted more than estimated
    assert await gateway.prompt_budget("scorer") == 9000
    gateway.context_windows.observe(listing.description, MODEL, 500, 1000)
    assert await gateway.prompt_budget("scorer") == 4500
    assert await gateway.prompt_budget("summarizer") is None
    await gateway.close()


async def test_an_unlisted_window_is_unknown_and_read_once(tmp_path: Path) -> None:
    endpoint = ScriptedProvider(windows={"another-model": 4096})
    gateway = LLMGateway(settings(), {"scorer": endpoint}, CallLog(None))
    assert await gateway.context_window("scorer") is None
    assert await gateway.context_window("scorer") is None
    assert endpoint.listed == 1
    await gateway.close()


async def test_the_registries_passed_in_are_the_ones_used(tmp_path: Path) -> None:
    """The service's two gateways share one ledger, one output-mode and one window
    registry: what one learns the other uses."""
    ledger, modes, windows = TokenLedger(), OutputModes(), ContextWindows()
    endpoint = ScriptedProvider([answer(), answer()])
    shared: dict[str, Any] = {"output_modes": modes, "context_windows": windows, "ledger": ledger}
    first = LLMGateway(settings(), {"scorer": endpoint}, CallLog(None), **shared)
    second = LLMGateway(settings(), {"scorer": endpoint}, CallLog(None), **shared)
    assert first.ledger is ledger and first.output_modes is modes
    assert first.context_windows is windows
    await first.structured("scorer", MESSAGES, Reply)
    await second.structured("scorer", MESSAGES, Reply)
    assert ledger.totals()[("scorer", MODEL)].calls == 2
    await first.close()


async def test_a_step_gateway_counts_the_steps_wall_time(tmp_path: Path) -> None:
    endpoint = ScriptedProvider([answer(), answer(), answer()])
    pipeline = LLMGateway(settings(), {"scorer": endpoint}, CallLog(None), step_wall_time=True)
    scoring = LLMGateway(settings(), {"scorer": endpoint}, CallLog(None))
    await pipeline.structured("scorer", MESSAGES, Reply, step=3)
    await pipeline.structured("scorer", MESSAGES, Reply)
    await scoring.structured("scorer", MESSAGES, Reply, step=5)
    assert pipeline.ledger.waited(3) > 0.0  # counted: a call of step 3 was outstanding
    assert scoring.ledger.waited(5) == 0.0  # the scoring gateway measures no step
    assert scoring.ledger.for_step(5)[("scorer", MODEL)].calls == 1


async def test_close_closes_each_provider_once_and_flushes_the_log(tmp_path: Path) -> None:
    shared, own = ScriptedProvider([answer()]), ScriptedProvider()
    gateway = LLMGateway(
        settings(),
        {"scorer": shared, "analyzer": shared, "summarizer": own},
        CallLog(tmp_path / "logs"),
    )
    await gateway.structured("scorer", MESSAGES, Reply)
    (record,) = await lines(tmp_path, gateway)
    assert record["outcome"] == "ok"
    assert (shared.closed, own.closed) == (1, 1)
