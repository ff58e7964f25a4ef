"""The judge's HTTP client (``amaris.llm.transport``, aiohttp) against real sockets on
127.0.0.1.

A raw asyncio server answers with scripted bytes: keep-alive reuse, a server closing an
idle connection, a connection lost mid-response, chunked, close-delimited and gzip bodies,
malformed HTTP and JSON, status errors, bounded bodies, TLS, a proxy. No conftest fixture
(the mutation run of ``amaris/llm/transport.py`` uses ``--noconftest``); the fake LLM's
protocol cases are in tests/llm/test_transport_fake_llm.py.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import json
import math
import ssl
import time
from pathlib import Path

import openai
import pytest

from amaris.app.running import free_port
from amaris.llm.providers import Completion, OpenAIProvider, parse_completion
from amaris.llm.transport import ResponseTooLargeError
from amaris.settings import Settings
from tests.support.raw_http import ANSWER, RawServer, ok, raw_server, trickling_server

MESSAGES = [{"role": "user", "content": "hello"}]


DEADLINE_S = 60.0
"""Generous bound of a wait for a condition (never part of an assertion)."""


def client_holds(port: int) -> bool:
    """Whether a socket on this machine still holds a connection to ``127.0.0.1:port``
    from the client side: established, or closed by the server and not yet by the client
    (Linux ``/proc/net/tcp``: states 01 and 08)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        remote, state = line.split()[2:4]
        if int(remote.rsplit(":", 1)[1], 16) == port and state in ("01", "08"):
            return True
    return False


async def complete(url: str | None, timeout: float = 5.0) -> str:
    provider = OpenAIProvider("sk-test", url)
    options = Settings().agents.for_agent("scorer").model_copy(update={"timeout": timeout})
    try:
        return (await provider.complete("scorer", MESSAGES, options)).content
    finally:
        await provider.close()


async def test_request_carries_the_sdk_headers_and_the_json_body() -> None:
    async with raw_server(lambda request, _: ok()) as server:
        assert await complete(server.url) == '{"ok": true}'
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["host"] == server.url.split("/")[2]
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("AsyncOpenAI/Python")
    assert json.loads(body)["messages"] == MESSAGES


async def test_keep_alive_connection_is_reused() -> None:
    async with raw_server(lambda request, _: ok()) as server:
        provider = OpenAIProvider("k", server.url)
        options = Settings().agents.for_agent("scorer")
        for _ in range(5):
            assert (await provider.complete("scorer", MESSAGES, options)).prompt_tokens == 7
        await provider.close()
    assert (len(server.requests), server.connections) == (5, 1)


async def test_connection_the_server_closed_while_idle_is_not_reused() -> None:
    def answer_then_close(request: bytes, writer: asyncio.StreamWriter) -> bytes | None:
        writer.write(ok())
        return None  # as a server whose keep-alive timer ran out

    async with raw_server(answer_then_close) as server:
        provider = OpenAIProvider("k", server.url)
        options = Settings().agents.for_agent("scorer")
        port = int(server.url.split(":")[2].split("/")[0])
        for _ in range(3):
            assert (await provider.complete("scorer", MESSAGES, options)).content
            # Idle until the server's close has reached the client and it let go of the
            # socket: the next request must not find that connection in the pool.
            deadline = time.monotonic() + DEADLINE_S
            while client_holds(port):
                assert time.monotonic() < deadline, "the client kept the closed connection"
                await asyncio.sleep(0.01)
        await provider.close()
    assert (len(server.requests), server.connections) == (3, 3)


async def test_reused_connection_closed_without_an_answer_is_a_connection_error() -> None:
    # Not resent here: the gateway's retry layer decides (and counts the attempt).
    answered: set[int] = set()

    def once_per_connection(request: bytes, writer: asyncio.StreamWriter) -> bytes | None:
        if id(writer) in answered:
            return None
        answered.add(id(writer))
        return ok()

    async with raw_server(once_per_connection) as server:
        provider = OpenAIProvider("k", server.url)
        options = Settings().agents.for_agent("scorer")
        assert (await provider.complete("scorer", MESSAGES, options)).content
        with pytest.raises(openai.APIConnectionError, match=r"Server ?[dD]isconnected"):
            await provider.complete("scorer", MESSAGES, options)
        assert (await provider.complete("scorer", MESSAGES, options)).content
        await provider.close()
    assert (len(server.requests), server.connections) == (3, 2)


async def test_partial_response_then_silence_is_a_timeout() -> None:
    async with raw_server(lambda request, _: ok()[:60]) as server:
        with pytest.raises(openai.APITimeoutError):
            await complete(server.url, timeout=0.3)


async def test_server_closing_mid_response_is_a_connection_error() -> None:
    def partial_then_close(request: bytes, writer: asyncio.StreamWriter) -> bytes | None:
        writer.write(ok()[:60])
        return None

    async with raw_server(partial_then_close) as server:
        with pytest.raises(openai.APIConnectionError) as caught:
            await complete(server.url)
    assert not isinstance(caught.value, openai.APITimeoutError)
    assert "Connection error" in str(caught.value)


async def test_refused_connection_is_a_connection_error_not_a_timeout() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(openai.APIConnectionError) as caught:
        await complete(url)
    assert not isinstance(caught.value, openai.APITimeoutError)
    assert "Cannot connect" in str(caught.value)


async def test_silent_server_is_a_timeout() -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        await asyncio.sleep(5)
        writer.close()

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(openai.APITimeoutError):
            await complete(f"http://127.0.0.1:{port}/v1", timeout=0.3)
    finally:
        server.close()


async def test_trickling_answer_is_abandoned_at_the_attempts_deadline() -> None:
    # Every gap is far under the timeout: only a deadline for the whole attempt ends it.
    answer = ok(json.dumps({**ANSWER, "pad": " " * 4000}).encode())
    async with trickling_server(answer, 100) as (url, sent):
        async with asyncio.timeout(DEADLINE_S):  # watchdog only
            with pytest.raises(openai.APITimeoutError):
                await complete(url, timeout=0.4)
    assert len(sent) < len(answer) // 100


def huge_answer(size: int) -> bytes:
    """A chat completion whose answer is ``size`` bytes of text."""
    return json.dumps(
        {"choices": [{"message": {"role": "assistant", "content": "x" * size}}]}
    ).encode()


async def complete_capped(url: str, max_bytes: int) -> Completion:
    provider = OpenAIProvider("k", url)
    options = (
        Settings()
        .agents.for_agent("scorer")
        .model_copy(update={"timeout": 5.0, "max_response_bytes": max_bytes})
    )
    try:
        return await provider.complete("scorer", MESSAGES, options)
    finally:
        await provider.close()


async def test_body_past_max_response_bytes_is_abandoned_while_read() -> None:
    # Chunked: no length to refuse up front; the client stops reading past the limit.
    body = huge_answer(8_000_000)
    chunked = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 65536]), body[i : i + 65536])
        for i in range(0, len(body), 65536)
    )
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    async with raw_server(lambda request, _: head + chunked + b"0\r\n\r\n") as server:
        async with asyncio.timeout(DEADLINE_S):
            with pytest.raises(ResponseTooLargeError, match="ran past") as caught:
                await complete_capped(server.url, 262_144)
    assert caught.value.limit == 262_144


async def test_declared_length_past_max_response_bytes_is_refused_unread() -> None:
    declared = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 150000000\r\n\r\n{"
    )
    async with raw_server(lambda request, _: declared) as server:
        async with asyncio.timeout(DEADLINE_S):
            with pytest.raises(ResponseTooLargeError, match="declares 150000000 bytes"):
                await complete_capped(server.url, 262_144)


async def test_answer_within_max_response_bytes_is_read_whole() -> None:
    async with raw_server(lambda request, _: ok(huge_answer(200_000))) as server:
        completion = await complete_capped(server.url, 262_144)
    assert completion.content == "x" * 200_000


async def test_connection_after_an_oversized_answer_is_not_reused() -> None:
    answers = iter([ok(huge_answer(300_000)), ok()])
    async with raw_server(lambda request, _: next(answers)) as server:
        provider = OpenAIProvider("k", server.url)
        options = Settings().agents.for_agent("scorer")
        with pytest.raises(ResponseTooLargeError):
            await provider.complete("scorer", MESSAGES, options)
        assert (await provider.complete("scorer", MESSAGES, options)).content == '{"ok": true}'
        await provider.close()
    assert server.connections == 2


async def test_long_error_body_is_cut_not_read_whole() -> None:
    body = json.dumps({"error": {"message": "overloaded " + "y" * 5_000_000}}).encode()
    answer = b"HTTP/1.1 503 Busy\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    async with raw_server(lambda request, _: answer) as server:
        with pytest.raises(openai.InternalServerError) as caught:
            await complete(server.url)
    assert caught.value.status_code == 503
    assert len(str(caught.value)) < 70_000


async def test_answer_nested_too_deep_is_a_value_error() -> None:
    async with raw_server(lambda request, _: ok(b"[" * 100_000)) as server:
        with pytest.raises(ValueError, match="nests too deep"):
            await complete(server.url)


def test_logprobs_past_the_float_range_are_kept_as_infinity() -> None:
    raw = (
        b'{"choices": [{"message": {"content": "4"}, "logprobs": {"content": [{"token": "4",'
        b' "logprob": -1' + b"0" * 400 + b', "top_logprobs": [{"token": "4", "logprob": NaN}]}]}}]}'
    )
    completion = parse_completion(raw)
    assert completion.logprobs is not None
    token = completion.logprobs[0]
    assert token.logprob == float("-inf")
    assert math.isnan(token.top[0][1])


def test_lone_surrogates_of_an_answer_are_replaced() -> None:
    raw = b'{"choices": [{"message": {"content": "ok \\ud800", "reasoning_content": "\\udfff"}}]}'
    completion = parse_completion(raw)
    assert completion.content == "ok \ufffd"
    assert completion.reasoning == "\ufffd"
    completion.content.encode("utf-8")


@pytest.mark.parametrize(
    "status, error",
    [
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
    ],
)
async def test_status_errors_are_the_sdk_classes_with_their_headers(
    status: int, error: type[openai.APIStatusError]
) -> None:
    body = json.dumps({"error": {"message": "slow down"}}).encode()
    answer = (
        b"HTTP/1.1 %d Nope\r\nRetry-After: 2\r\nContent-Length: %d\r\n\r\n" % (status, len(body))
        + body
    )
    async with raw_server(lambda request, _: answer) as server:
        with pytest.raises(error) as caught:
            await complete(server.url)
    assert caught.value.status_code == status
    assert caught.value.response.headers["retry-after"] == "2"
    assert "slow down" in str(caught.value)


async def test_chunked_body() -> None:
    body = json.dumps(ANSWER).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:]))
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n"
    async with raw_server(lambda request, _: answer) as server:
        assert await complete(server.url) == '{"ok": true}'


async def test_body_delimited_by_connection_close() -> None:
    body = json.dumps(ANSWER).encode()

    def close_delimited(request: bytes, writer: asyncio.StreamWriter) -> bytes | None:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body)
        return None

    async with raw_server(close_delimited) as server:
        assert await complete(server.url) == '{"ok": true}'


async def test_gzip_body_is_decoded() -> None:
    answer = ok(gzip.compress(json.dumps(ANSWER).encode()), b"Content-Encoding: gzip\r\n")
    async with raw_server(lambda request, _: answer) as server:
        assert await complete(server.url) == '{"ok": true}'


async def test_malformed_http_is_a_connection_error() -> None:
    async with raw_server(lambda request, _: b"SMTP ready\r\n\r\n") as server:
        with pytest.raises(openai.APIConnectionError, match="Connection error"):
            await complete(server.url)


async def test_malformed_json_body_of_a_200_is_a_value_error() -> None:
    # The gateway treats it as an unusable answer (not a transport error).
    answer = ok(b'{"choices": [{"message": ')
    async with raw_server(lambda request, _: answer) as server:
        with pytest.raises(ValueError):
            await complete(server.url)


async def test_non_json_error_body_keeps_its_status_class() -> None:
    body = b"<html>bad gateway</html>"
    answer = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    async with raw_server(lambda request, _: answer) as server:
        with pytest.raises(openai.InternalServerError) as caught:
            await complete(server.url)
    assert caught.value.status_code == 502
    assert caught.value.body == "<html>bad gateway</html>"


def test_parse_completion_reads_the_first_choice_and_usage() -> None:
    parsed = parse_completion(json.dumps(ANSWER).encode())
    assert (parsed.content, parsed.prompt_tokens, parsed.completion_tokens) == (
        '{"ok": true}',
        7,
        3,
    )
    assert parse_completion(b'{"choices": []}').content == ""
    assert parse_completion(b'{"choices": [{"message": {"content": null}}]}').content == ""
    with pytest.raises(ValueError):
        parse_completion(b"[1, 2]")
    with pytest.raises(ValueError):
        parse_completion(b"<html>")


def clear_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "configured", ["http://judge.invalid:8000/v1", None], ids=["base_url", "OPENAI_BASE_URL"]
)
async def test_request_through_an_environment_proxy_goes_via_the_proxy(
    monkeypatch: pytest.MonkeyPatch,
    configured: str | None,
) -> None:
    # With no base_url configured the SDK takes OPENAI_BASE_URL: the proxy decision must be
    # about that host, not api.openai.com.
    clear_proxies(monkeypatch)
    async with raw_server(lambda request, _: ok()) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.removesuffix("/v1"))
        monkeypatch.setenv("OPENAI_BASE_URL", "http://judge.invalid:8000/v1")
        assert await complete(configured) == '{"ok": true}'
    # Absolute-form request line: sent to the proxy.
    assert proxy.requests[0].startswith(
        b"POST http://judge.invalid:8000/v1/chat/completions HTTP/1.1"
    )


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_https_endpoint_verifies_its_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_proxies(monkeypatch)
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    state = RawServer(lambda request, _: ok())
    server = await asyncio.start_server(state.serve, "127.0.0.1", 0, ssl=context)
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    try:
        with pytest.raises(openai.APIConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await complete(url)  # not signed by a trusted authority
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert await complete(url) == '{"ok": true}'
    finally:
        server.close()
    assert b"Authorization: Bearer sk-test" in state.requests[-1]
