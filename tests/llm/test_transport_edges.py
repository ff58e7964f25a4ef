"""The judge's HTTP client (``amaris.llm.transport``) at its edges: ``JsonEndpoint.post``
against a raw server on 127.0.0.1 (bodies exactly at and one byte past their limits, the
2xx range, the base URL's query, the raw UTF-8 body, the pool's size, sessions on two event
loops), and ``status_error`` / ``environment_proxy`` called directly. No conftest fixture
(the mutation run of ``amaris/llm/transport.py`` uses ``--noconftest``);
tests/llm/test_transport.py has the protocol's cases through the provider.
"""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import warnings

import openai
import pytest

from amaris.llm.transport import (
    JsonEndpoint,
    ResponseTooLargeError,
    environment_proxy,
    status_error,
)
from tests.support.raw_http import RawServer, ok, raw_server

LIMIT = 1000
"""``max_bytes`` of the bounded-body tests."""
DEADLINE_S = 60.0
"""Watchdog of a wait that must end (never part of an assertion)."""


def endpoint(url: str) -> JsonEndpoint:
    return JsonEndpoint(openai.AsyncOpenAI(api_key="k", base_url=url))


async def post(url: str, max_bytes: int = LIMIT, body: str | None = None) -> bytes:
    client = endpoint(url)
    try:
        return await client.post("chat/completions", {"x": body}, 5.0, max_bytes)
    finally:
        await client.close()


def chunked(body: bytes, status: bytes = b"200 OK") -> bytes:
    """A response with ``body`` sent in chunks of 100 bytes (no length declared)."""
    parts = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 100]), body[i : i + 100])
        for i in range(0, len(body), 100)
    )
    return b"HTTP/1.1 " + status + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + parts + b"0\r\n\r\n"


def answer(status: bytes, body: bytes) -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


# -- bounded bodies ------------------------------------------------------------------------


async def test_a_declared_body_of_exactly_max_bytes_is_read_whole() -> None:
    async with raw_server(lambda request, _: ok(b"a" * LIMIT)) as server:
        assert await post(server.url) == b"a" * LIMIT


async def test_a_declared_body_one_byte_past_max_bytes_is_refused() -> None:
    async with raw_server(lambda request, _: ok(b"a" * (LIMIT + 1))) as server:
        with pytest.raises(ResponseTooLargeError) as caught:
            await post(server.url)
    assert str(caught.value) == f"the response declares {LIMIT + 1} bytes; the limit is {LIMIT}"
    assert caught.value.limit == LIMIT


async def test_an_undeclared_body_of_exactly_max_bytes_is_read_whole() -> None:
    async with raw_server(lambda request, _: chunked(b"b" * LIMIT)) as server:
        assert await post(server.url) == b"b" * LIMIT


async def test_an_undeclared_body_one_byte_past_max_bytes_is_abandoned() -> None:
    async with raw_server(lambda request, _: chunked(b"b" * (LIMIT + 1))) as server:
        with pytest.raises(ResponseTooLargeError) as caught:
            await post(server.url)
    assert str(caught.value) == (
        f"the response ran past the limit of {LIMIT} bytes (abandoned unread)"
    )
    assert caught.value.limit == LIMIT


@pytest.mark.parametrize("declared", [True, False])
async def test_an_error_body_keeps_its_first_64_kib(declared: bool) -> None:
    # Cut, not refused: an error's start names the problem.
    body = b"e" * 100_000
    response = answer(b"418 Teapot", body) if declared else chunked(body, b"418 Teapot")
    async with raw_server(lambda request, _: response) as server:
        with pytest.raises(openai.APIStatusError) as caught:
            await post(server.url)
    assert caught.value.body == "e" * 65_536


async def test_an_error_body_of_exactly_64_kib_is_kept_whole() -> None:
    body = b"f" * 65_536
    async with raw_server(lambda request, _: chunked(body, b"503 Busy")) as server:
        with pytest.raises(openai.InternalServerError) as caught:
            await post(server.url)
    assert caught.value.body == body.decode()


# -- the 2xx range -------------------------------------------------------------------------


@pytest.mark.parametrize("status", [b"201 Created", b"299 Odd"])
async def test_every_2xx_answer_past_max_bytes_is_refused(status: bytes) -> None:
    # Not cut to the error body's 64 KiB and returned: a 2xx answer is bounded by max_bytes.
    async with raw_server(lambda request, _: answer(status, b"a" * (LIMIT + 1))) as server:
        with pytest.raises(ResponseTooLargeError, match="declares 1001 bytes"):
            await post(server.url)


@pytest.mark.parametrize("status", [b"200 OK", b"201 Created", b"299 Odd"])
async def test_every_2xx_answer_is_returned(status: bytes) -> None:
    async with raw_server(lambda request, _: answer(status, b'{"a": 1}')) as server:
        assert await post(server.url) == b'{"a": 1}'


async def test_a_300_answer_is_a_status_error_its_body_cut_not_refused() -> None:
    # Past max_bytes (not past the error cut): read as an error body, not as an answer.
    long = b'{"a": "' + b"x" * (2 * LIMIT) + b'"}'
    async with raw_server(lambda request, _: answer(b"300 Choices", long)) as server:
        with pytest.raises(openai.APIStatusError) as caught:
            await post(server.url)
    assert type(caught.value) is openai.APIStatusError
    assert caught.value.status_code == 300
    assert caught.value.body == {"a": "x" * (2 * LIMIT)}


# -- the request ---------------------------------------------------------------------------


async def test_the_base_urls_query_and_the_raw_utf8_body_are_sent() -> None:
    async with raw_server(lambda request, _: ok(b"{}")) as server:
        url = server.url.replace("/v1", "/v1/?api-version=2024-01")
        assert await post(url, body="héllo ✓") == b"{}"
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /v1/chat/completions?api-version=2024-01 HTTP/1.1"
    assert body == '{"x": "héllo ✓"}'.encode()


async def test_the_pool_holds_as_many_connections_as_requests_in_flight() -> None:
    # Neither request is answered until both arrived: a capped pool would hold the second
    # back behind the first, and neither would end.
    arrived: list[asyncio.StreamWriter] = []
    both = asyncio.Event()
    reply = ok(b'{"n": 1}')

    def hold(request: bytes, writer: asyncio.StreamWriter) -> bytes | None:
        arrived.append(writer)
        if len(arrived) == 2:
            for waiting in arrived:
                waiting.write(reply)
            both.set()
        return b""

    async with raw_server(hold) as server:
        client = endpoint(server.url)
        try:
            async with asyncio.timeout(DEADLINE_S):
                got = await asyncio.gather(
                    client.post("chat/completions", {}, None, LIMIT),
                    client.post("chat/completions", {}, None, LIMIT),
                )
        finally:
            await client.close()
    assert list(got) == [b'{"n": 1}', b'{"n": 1}']
    assert server.connections == 2


def test_one_endpoint_serves_two_event_loops_and_closes_both() -> None:
    # The scorer posts from the API's loop, the step agents from the pipeline's thread and
    # loop: one session each; close() on one loop closes the other's there.
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    server = RawServer(lambda request, _: ok(b"{}"))
    try:
        listening = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(server.serve, "127.0.0.1", 0), other
        ).result(DEADLINE_S)
        url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1"
        client = endpoint(url)
        first = asyncio.run_coroutine_threadsafe(
            client.post("chat/completions", {}, 5.0, LIMIT), other
        ).result(DEADLINE_S)

        async def on_this_loop() -> bytes:
            got = await client.post("chat/completions", {}, 5.0, LIMIT)
            await client.close()
            return got

        second = asyncio.run(on_this_loop())
        # Both keep-alive connections end: the client closed each on its own loop.
        deadline = time.monotonic() + DEADLINE_S
        while server.ended < 2:
            assert time.monotonic() < deadline, f"{server.ended} of 2 connections closed"
            time.sleep(0.01)

        async def stop_listening() -> None:
            # On the server's own loop: asyncio.Server is not thread-safe, and closing it from
            # here races the loop detaching the last connection.
            listening.close()
            await listening.wait_closed()

        asyncio.run_coroutine_threadsafe(stop_listening(), other).result(DEADLINE_S)
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(DEADLINE_S)
        other.close()
    assert (first, second) == (b"{}", b"{}")
    assert server.connections == 2


async def test_a_closed_endpoint_opens_a_new_session() -> None:
    async with raw_server(lambda request, _: ok(b"{}")) as server:
        client = endpoint(server.url)
        assert await client.post("chat/completions", {}, 5.0, LIMIT) == b"{}"
        # Closed, not dropped for the collector to find open (aiohttp warns of that).
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await client.close()
            gc.collect()
        assert [str(w.message) for w in caught if "Unclosed" in str(w.message)] == []
        assert await client.post("chat/completions", {}, 5.0, LIMIT) == b"{}"
        await client.close()
    assert server.connections == 2


# -- status errors, built directly ---------------------------------------------------------


@pytest.mark.parametrize(
    "status, error",
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (403, openai.PermissionDeniedError),
        (404, openai.NotFoundError),
        (409, openai.ConflictError),
        (422, openai.UnprocessableEntityError),
        (429, openai.RateLimitError),
        (402, openai.APIStatusError),
        (418, openai.APIStatusError),
        (499, openai.APIStatusError),
        (500, openai.InternalServerError),
        (501, openai.InternalServerError),
        (599, openai.InternalServerError),
    ],
)
def test_each_status_gets_the_sdks_class(status: int, error: type[Exception]) -> None:
    built = status_error("http://h/v1/chat/completions", status, [], b"")
    assert type(built) is error
    assert built.status_code == status
    assert built.body is None
    assert str(built) == f"Error code: {status} - None"
    assert str(built.response.request.url) == "http://h/v1/chat/completions"


@pytest.mark.parametrize(
    "content, body",
    [
        (b'{"error": {"message": "no"}}', {"message": "no"}),
        (b'{"detail": "no"}', {"detail": "no"}),
        (b'["no"]', ["no"]),
        (b"<html>no \xff</html>", "<html>no \ufffd</html>"),
    ],
    ids=["error-object", "object", "list", "not-json"],
)
def test_the_error_body_is_the_error_object_else_the_body(content: bytes, body: object) -> None:
    built = status_error("http://h/", 400, [(b"Retry-After", b"3")], content)
    assert built.body == body
    assert built.response.headers["retry-after"] == "3"
    assert built.response.content == content


# -- proxies from the environment ----------------------------------------------------------


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http", "https", "all", "no"):
        monkeypatch.delenv(f"{name}_proxy", raising=False)
        monkeypatch.delenv(f"{name.upper()}_PROXY", raising=False)
    return monkeypatch


def test_the_schemes_proxy_else_all_proxy_else_none(no_proxies: pytest.MonkeyPatch) -> None:
    assert environment_proxy("http://judge.invalid/v1") is None
    no_proxies.setenv("ALL_PROXY", "http://all.invalid:1")
    assert environment_proxy("http://judge.invalid/v1") == "http://all.invalid:1"
    no_proxies.setenv("HTTPS_PROXY", "http://tls.invalid:2")
    assert environment_proxy("https://judge.invalid/v1") == "http://tls.invalid:2"
    assert environment_proxy("http://judge.invalid/v1") == "http://all.invalid:1"


def test_no_proxy_names_the_host_even_behind_credentials(no_proxies: pytest.MonkeyPatch) -> None:
    no_proxies.setenv("HTTP_PROXY", "http://proxy.invalid:1")
    no_proxies.setenv("NO_PROXY", "judge.invalid")
    assert environment_proxy("http://judge.invalid:8000/v1/x") is None
    assert environment_proxy("http://user:p@ss@judge.invalid/v1") is None
    assert environment_proxy("http://other.invalid/v1") == "http://proxy.invalid:1"
    assert environment_proxy("http://judge.invalid@other.invalid/v1") == "http://proxy.invalid:1"


def test_an_error_that_is_a_string_is_the_body() -> None:
    built = status_error("http://h/", 422, [], json.dumps({"error": "bad"}).encode())
    assert built.body == "bad"
    assert str(built) == "Error code: 422 - {'error': 'bad'}"
