"""bench/performance/judge_transport.py compares like with like: each transport it measures
(amaris's client and the SDK's routes) does the same job against a raw server on 127.0.0.1
(the answer's bytes, bounded replies and error bodies, the SDK's errors, one deadline for an
attempt), and its targets are read as stated."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from amaris.llm.transport import ChatBody, ResponseTooLargeError
from bench.performance import judge_transport as bench
from tests.support.raw_http import ok, raw_server, trickling_server

BODY: ChatBody = {"model": "judge", "messages": [{"role": "user", "content": "hi"}]}
LIMIT = 1000
DEADLINE_S = 60.0
"""Watchdog of a wait that must end (never part of an assertion)."""


async def post(transport: str, url: str, timeout: float = 5.0) -> bytes:
    sdk = openai.AsyncOpenAI(api_key="k", base_url=url, max_retries=0)
    client = bench.endpoint(transport, sdk)
    try:
        async with asyncio.timeout(DEADLINE_S):
            return await client.post("chat/completions", BODY, timeout, LIMIT)
    finally:
        await client.close()
        await sdk.close()


def chunked(body: bytes) -> bytes:
    """A 200 response with ``body`` in chunks of 100 bytes (no length declared)."""
    parts = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 100]), body[i : i + 100])
        for i in range(0, len(body), 100)
    )
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + parts + b"0\r\n\r\n"


@pytest.fixture(params=bench.TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_each_transport_returns_the_answer_and_sends_the_body(transport: str) -> None:
    async with raw_server(lambda request, _: ok(b'{"a": 1}')) as server:
        assert await post(transport, server.url) == b'{"a": 1}'
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert b"authorization: bearer k" in head.lower()
    assert json.loads(body) == BODY


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "chunked"])
async def test_each_transport_refuses_a_reply_past_the_limit(
    transport: str, declared: bool
) -> None:
    reply = ok(b"a" * (LIMIT + 1)) if declared else chunked(b"a" * (LIMIT + 1))
    async with raw_server(lambda request, _: reply) as server:
        with pytest.raises(ResponseTooLargeError) as caught:
            await post(transport, server.url)
    assert caught.value.limit == LIMIT


async def test_each_transport_cuts_an_error_body_to_its_first_64_kib(transport: str) -> None:
    body = b"e" * 100_000
    reply = b"HTTP/1.1 503 Busy\r\nRetry-After: 2\r\nContent-Length: %d\r\n\r\n" % len(body)
    async with raw_server(lambda request, _: reply + body) as server:
        with pytest.raises(openai.InternalServerError) as caught:
            await post(transport, server.url)
    assert caught.value.body == "e" * 65_536
    assert caught.value.response.headers["retry-after"] == "2"


async def test_each_transport_ends_a_trickling_reply_at_the_attempts_deadline(
    transport: str,
) -> None:
    reply = ok(json.dumps({"pad": " " * 800}).encode())  # within LIMIT
    async with trickling_server(reply, 20) as (url, sent):
        with pytest.raises(openai.APITimeoutError):
            await post(transport, url, timeout=0.4)
    assert len(sent) < len(reply) // 20


def figures(batch_s: float, cpu_s: float) -> bench.Figures:
    return bench.Figures(batch_walls=[batch_s], reward_cpu=[cpu_s])


@pytest.mark.parametrize(
    "batch_s, cpu_s, verdict",
    [
        (1.10, 1.0, "PASS"),  # its batch ends 10% later
        (1.0, 1.5, "PASS"),  # it costs half as much CPU again
        (1.09, 1.49, "FAIL"),  # neither
    ],
)
def test_amaris_client_stays_only_while_it_beats_an_sdk_route(
    batch_s: float, cpu_s: float, verdict: str
) -> None:
    lines = bench.verdicts({"aiohttp": figures(1.0, 1.0), "sdk": figures(batch_s, cpu_s)})
    assert [line[2] for line in lines] == [verdict]
    assert "`sdk`" in lines[0][0]
