"""The request edge (``api.middleware``) without the services: the bearer key on every route
of the real app's route table, and ``RequestGuard`` / ``RequestMetrics`` driven through ASGI
with exact headers. Needs no fixture of tests/conftest.py (mutation testing runs it with
``--noconftest``: bench/evaluations/mutation.py ``auth``)."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from amaris.metrics import Metrics
from amaris.request_context import request_id_var
from amaris.services import Services
from amaris.settings import load_settings
from api.app import build_api
from api.errors import BodyError
from api.middleware import (
    OPEN_PATHS,
    RequestGuard,
    RequestMetrics,
    bearer_matches,
    host_name,
    is_json,
)
from tests.support.testclient import TestClient

KEY = "s3cret"
AUTH = [(b"authorization", b"Bearer s3cret")]
JSON = [(b"content-type", b"application/json")]
HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "amaris.internal"})
WAIT_S = 60.0
"""How long a request through the guard may take before the test fails: generous."""

# -- every route of the real app -----------------------------------------------------------------


def _no_services(metrics: Metrics) -> Services:
    raise AssertionError("a refused request must not start the services")


def test_every_route_of_the_real_app_but_healthz_is_refused_without_the_key(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        None,
        **{
            "memory.path": str(tmp_path),
            "server.api_key": KEY,
            "memory.embedding_model": "hashing",
        },
    )
    app = build_api(settings, _no_services)
    client = TestClient(app)  # no lifespan: a request that got past the key would fail
    protected = 0
    for route in iter_route_contexts(app.routes):
        assert route.path is not None and route.methods, route
        path = re.sub(r"\{[^}]+\}", "1", route.path)
        for method in sorted(route.methods):
            if route.path in OPEN_PATHS:
                continue
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
                r = client.request(method, path, headers=headers)
                assert r.status_code == 401, (method, path, headers)
                assert r.headers["www-authenticate"] == "Bearer"
                if method != "HEAD":
                    assert r.json()["error"] == "unauthorized"
                    assert r.json()["detail"][0]["field"] == "Authorization"
            protected += 1
    assert {"/healthz"} == OPEN_PATHS
    assert protected >= 12  # /score, /get_reward, /complete, steps, rubrics, memory, docs...


# -- the pure functions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [b"Bearer s3cret", b"bearer s3cret", b"BEARER s3cret", b"Bearer  s3cret ", b"Bearer s3cret\t"],
)
def test_the_right_bearer_key_matches(value: bytes) -> None:
    assert bearer_matches(value, b"s3cret")


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"s3cret",
        b"Basic s3cret",
        b"Bearers3cret",
        b"Bearer s3cre",
        b"Bearer s3cretx",
        b"Token s3cret",
        b"bearerx s3cret",
        b"Bearer",
        b"x Bearer s3cret",
    ],
)
def test_anything_else_does_not_match(value: bytes) -> None:
    assert not bearer_matches(value, b"s3cret")


@pytest.mark.parametrize(
    "value",
    [
        b"application/json",
        b"Application/JSON",
        b"application/json; charset=utf-8",
        b" application/json ;charset=utf-8",
        b"application/vnd.api+json",
        b"application/problem+json; charset=utf-8",
    ],
)
def test_json_media_types(value: bytes) -> None:
    assert is_json(value)


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"text/plain",
        b"application/xml",
        b"text/x+json",
        b"application/jsonp",
        b"json",
        b"application/json+xml",
    ],
)
def test_other_media_types(value: bytes) -> None:
    assert not is_json(value)


# -- RequestGuard through ASGI ------------------------------------------------------------


class Echo:
    """An ASGI app answering 200 with what it saw: the request id, the body it read."""

    def __init__(self, read_body: bool = True) -> None:
        self.read_body = read_body
        self.calls: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls.append(scope)
        body = b""
        status = 200
        if self.read_body:
            try:
                while True:
                    message = await receive()
                    body += message.get("body", b"")
                    if not message.get("more_body", False):
                        break
            except BodyError as exc:
                status = exc.status_code
                body = str(exc.detail).encode()
        response = JSONResponse(
            {"id": request_id_var.get(), "body": body.decode("latin-1")}, status_code=status
        )
        await response(scope, receive, send)


def _receiver(chunks: list[bytes], *, hang: bool = False) -> Callable[[], Awaitable[Message]]:
    queue: list[Message] = [
        {"type": "http.request", "body": c, "more_body": True} for c in chunks[:-1]
    ]
    if chunks:  # the last: "more_body" absent means False (ASGI)
        last = {"more_body": True} if hang else {}
        queue.append({"type": "http.request", "body": chunks[-1], **last})
    if not chunks and not hang:
        queue.append({"type": "http.request", "body": b""})

    async def receive() -> Message:
        await asyncio.sleep(0)  # a yield, as a server's receive does: the deadline may act
        if queue:
            return queue.pop(0)
        if hang:
            await asyncio.Event().wait()  # a client that never sends the rest
        return {"type": "http.disconnect"}

    return receive


def call(
    app: Any,
    headers: list[tuple[bytes, bytes]],
    chunks: list[bytes] | None = None,
    *,
    path: str = "/x",
    method: str = "POST",
    hang: bool = False,
    key: str | None = KEY,
    host: bytes | None = b"127.0.0.1:8002",
    limit: int = 10,
    timeout: float = 30.0,
) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request through ``RequestGuard(app)`` serving :data:`HOSTS`, with a ``Host``
    header of ``host`` (none if None) before ``headers``: status, headers, body."""
    guard = RequestGuard(
        app, hosts=HOSTS, api_key=key, max_body_bytes=limit, body_timeout_seconds=timeout
    )
    if host is not None:
        headers = [(b"host", host), *headers]
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def run() -> None:
        async with asyncio.timeout(WAIT_S):  # a guard that never answers fails, not hangs
            await guard(scope, _receiver(chunks or [], hang=hang), send)

    asyncio.run(run())
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    header_map: dict[bytes, bytes] = {}
    for name, value in start["headers"]:
        assert name not in header_map, f"{name!r} sent twice"
        header_map[name] = value
    return start["status"], header_map, body


def length(n: int | bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-length", n if isinstance(n, bytes) else str(n).encode())]


def test_the_key_opens_a_route_and_its_absence_or_a_wrong_one_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Echo()
    status, headers, body = call(app, AUTH + JSON + length(2), [b"{}"])
    assert (status, body) == (200, b'{"id":"' + headers[b"x-request-id"] + b'","body":"{}"}')
    assert b"connection" not in headers  # the body was read whole
    with caplog.at_level(logging.WARNING, logger="amaris.api"):
        for auth in ([], [(b"authorization", b"Bearer wrong")], [(b"authorization", b"s3cret")]):
            status, headers, body = call(app, auth + JSON + length(2), [b"{}"])
            assert status == 401
            assert headers[b"www-authenticate"] == b"Bearer"
            assert b'"field":"Authorization"' in body
            assert headers[b"connection"] == b"close"  # the body was never read
    assert len(app.calls) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "401 POST '/x': missing or wrong bearer key in the Authorization header"
    ] * 3


def test_healthz_needs_no_key_and_no_key_configured_opens_everything() -> None:
    assert call(Echo(), [], path="/healthz", method="GET")[0] == 200
    assert call(Echo(), [], path="/healthz/", method="GET")[0] == 401
    for key in (None, ""):
        assert call(Echo(), JSON + length(2), [b"{}"], key=key)[0] == 200


def test_a_declared_body_over_the_limit_is_413_before_the_app() -> None:
    app = Echo()
    assert call(app, AUTH + JSON + length(10), [b"1234567890"], limit=10)[0] == 200
    status, headers, body = call(app, AUTH + JSON + length(11), [b"12345678901"], limit=10)
    assert status == 413
    assert b'"field":"body"' in body
    assert b"server.max_body_bytes (10)" in body
    assert headers[b"connection"] == b"close"
    # More digits than any limit: over it; 18 digits are read as the number they are.
    assert call(app, AUTH + JSON + length(b"9" * 19), [b"{}"], limit=10)[0] == 413
    assert call(app, AUTH + JSON + length(b"0" * 17 + b"2"), [b"{}"], limit=10)[0] == 200
    assert len(app.calls) == 2
    # The key is checked first, then the size, then the type.
    assert call(app, JSON + length(11), [b"{}"], limit=10)[0] == 401
    assert call(app, AUTH + length(11), [b"{}"], limit=10)[0] == 413


def test_a_body_must_be_json_and_a_post_without_one_must_declare_json() -> None:
    app = Echo()
    status, headers, body = call(
        app, [*AUTH, (b"content-type", b"text/plain"), *length(2)], [b"hi"]
    )
    assert status == 415
    assert b'"field":"Content-Type"' in body
    assert b"got 'text/plain'" in body
    status, _, body = call(app, AUTH + length(2), [b"hi"])
    assert (status, b"got 'none'" in body) == (415, True)
    long_type = b"t" * 150
    status, _, body = call(app, [*AUTH, (b"content-type", long_type), *length(2)], [b"hi"])
    assert b"got '" + b"t" * 100 + b"'" in body and b"t" * 101 not in body
    # A streamed (chunked) body without a length needs a type too.
    assert call(app, [*AUTH, (b"transfer-encoding", b"chunked")], [b"hi"])[0] == 415
    assert call(app, [*AUTH, (b"content-length", b"abc")], [b"hi"])[0] == 415
    assert app.calls == []
    # No body (no length, or a length of 0): a method that changes state must still declare
    # JSON, which a cross-site form cannot; a GET, HEAD or OPTIONS needs no type.
    form = [(b"content-type", b"application/x-www-form-urlencoded"), (b"origin", b"null")]
    for method in ("POST", "PUT", "PATCH", "DELETE", "PROPFIND"):
        for headers in (AUTH, AUTH + length(0), AUTH + form + length(0)):
            status, answer, body = call(app, headers, method=method)
            assert status == 415, (method, headers)
            assert b'"field":"Content-Type"' in body
            assert f"a {method} must declare a JSON body, an empty one too".encode() in body
            assert b"connection" not in answer  # there was no body to leave unread
    assert app.calls == []
    assert call(app, AUTH + JSON)[0] == 200
    assert call(app, AUTH + JSON + length(0), method="DELETE")[0] == 200
    common = [
        (b"accept", b"*/*"),
        (b"cookie", b"c=1"),
        (b"accept-encoding", b"gzip"),
    ]
    for method in ("GET", "HEAD", "OPTIONS"):
        status, headers, _ = call(app, [*AUTH, *common], method=method)
        assert status == 200 and b"connection" not in headers
    assert re.fullmatch(rb"[0-9a-f]{16}", headers[b"x-request-id"])  # not a header's value
    status, headers, _ = call(
        app, [*AUTH, (b"content-type", b"application/vnd.x+json"), *length(1)], [b"1"]
    )
    assert status == 200 and b"connection" not in headers


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (b"localhost", b"localhost"),
        (b"LocalHost:8002", b"localhost"),
        (b"localhost.:80", b"localhost"),
        (b"localhost:", b"localhost"),
        (b"127.0.0.1:8002", b"127.0.0.1"),
        (b"[::1]", b"[::1]"),
        (b"[::1]:8002", b"[::1]"),
        (b"[::1]:", b"[::1]"),
        (b"[FD00::7]:1", b"[fd00::7]"),
        (b"rebind.evil.example:8002", b"rebind.evil.example"),
    ],
)
def test_a_host_header_names_a_host(value: bytes, name: bytes) -> None:
    assert host_name(value) == name


@pytest.mark.parametrize(
    "value", [b"", b":8002", b"localhost:x", b"localhost:80:80", b"[::1", b"[::1]x", b"a:+1"]
)
def test_a_malformed_host_header_names_none(value: bytes) -> None:
    assert host_name(value) is None


def test_a_host_not_served_is_421_before_the_key_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Echo()
    for host in (b"localhost", b"[::1]:1", b"AMARIS.internal:443", b"amaris.internal."):
        assert call(app, AUTH + JSON + length(2), [b"{}"], host=host)[0] == 200, host
    with caplog.at_level(logging.WARNING, logger="amaris.api"):
        for host, others in [
            (b"rebind.evil.example", AUTH),  # DNS rebinding: the page's own name
            (b"rebind.evil.example:8002", []),  # 421 before the key is looked at
            (b"testserver", AUTH),
            (b"127.0.0.2", AUTH),
            (b"localhost:x", AUTH),
            (None, AUTH),  # no Host at all (HTTP/1.0)
            (b"localhost", [*AUTH, (b"host", b"rebind.evil.example")]),  # two of them
        ]:
            status, headers, body = call(app, others + JSON + length(2), [b"{}"], host=host)
            assert status == 421, host
            assert b'"error":"misdirected_request"' in body
            assert b'"field":"Host"' in body
            assert headers[b"connection"] == b"close"  # the body was never read
    assert len(app.calls) == 4
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == (
        "421 POST '/x': this server does not answer the Host 'rebind.evil.example': it "
        "answers localhost, 127.0.0.1, [::1], server.host and the names in "
        "server.allowed_hosts"
    )
    assert "the Host none:" in messages[5]
    assert "(2 Host headers)" in messages[6]


def test_a_streamed_body_is_counted_across_its_chunks() -> None:
    headers = AUTH + JSON + [(b"transfer-encoding", b"chunked")]
    status, _, body = call(Echo(), headers, [b"123", b"456", b"7890"], limit=10)
    assert (status, body.endswith(b'"body":"1234567890"}')) == (200, True)
    status, _, body = call(Echo(), headers, [b"123456", b"78901"], limit=10)
    assert status == 413
    assert b"request body is over server.max_body_bytes (10)" in body
    # A declared length that lies is caught as the body arrives.
    status, _, _ = call(Echo(), AUTH + JSON + length(2), [b"1234", b"5678", b"901"], limit=10)
    assert status == 413


def test_a_body_not_whole_by_the_deadline_is_408() -> None:
    status, headers, body = call(Echo(), AUTH + JSON + length(5), [b"12"], hang=True, timeout=2.0)
    assert status == 408
    assert b"request body not received within server.body_timeout_seconds (2 s)" in body
    assert headers[b"connection"] == b"close"


def test_after_the_body_the_channel_passes_the_next_message_on() -> None:
    seen: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(await receive())
        seen.append(await receive())
        await JSONResponse({})(scope, receive, send)

    assert call(app, AUTH + JSON + length(2), [b"{}"])[0] == 200
    assert [m["type"] for m in seen] == ["http.request", "http.disconnect"]


def test_an_answer_before_the_body_closes_the_connection() -> None:
    status, headers, _ = call(Echo(read_body=False), AUTH + JSON + length(2), [b"{}"])
    assert (status, headers[b"connection"]) == (200, b"close")
    status, headers, _ = call(Echo(read_body=False), AUTH + JSON)
    assert status == 200 and b"connection" not in headers


@pytest.mark.parametrize("request_id", [b"a", b"req-1.2_3:4", b"A" * 64])
def test_a_safe_request_id_is_kept(request_id: bytes) -> None:
    others = [(b"x-trace-id", b"other"), (b"user-agent", b"ua")]
    _, headers, body = call(Echo(), [*AUTH, *JSON, (b"x-request-id", request_id), *others])
    assert headers[b"x-request-id"] == request_id
    assert b'"id":"' + request_id + b'"' in body


@pytest.mark.parametrize("request_id", [b"", b"A" * 65, b"a b", b"a\nb", b"a/b", "é".encode()])
def test_an_unsafe_request_id_is_replaced_by_a_new_one(request_id: bytes) -> None:
    _, first, _ = call(Echo(), [*AUTH, (b"x-request-id", request_id)])
    _, second, _ = call(Echo(), AUTH)
    assert re.fullmatch(rb"[0-9a-f]{16}", first[b"x-request-id"])
    assert re.fullmatch(rb"[0-9a-f]{16}", second[b"x-request-id"])
    assert first[b"x-request-id"] != second[b"x-request-id"]


def test_the_request_id_is_unset_after_the_request() -> None:
    call(Echo(), [*AUTH, (b"x-request-id", b"abc")])
    assert request_id_var.get() != "abc"


def test_other_scopes_pass_through_untouched() -> None:
    seen: list[tuple[Scope, Receive]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope, receive))

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        raise AssertionError(message)

    for guard in (
        RequestGuard(app, hosts=HOSTS, api_key=KEY, max_body_bytes=1, body_timeout_seconds=1.0),
        RequestMetrics(app, Metrics()),
    ):
        scope: Scope = {"type": "lifespan", "headers": [], "path": "/x"}
        asyncio.run(guard(scope, receive, send))
        assert seen.pop() == (scope, receive)


# -- RequestMetrics ----------------------------------------------------------------------


def _count(metrics: Metrics, method: str, route: str, status: str) -> float | None:
    return metrics.registry.get_sample_value(
        "amaris_http_requests_total", {"method": method, "route": route, "status": status}
    )


def test_requests_are_counted_by_route_template_and_status() -> None:
    async def item(request: Request) -> JSONResponse:
        return JSONResponse({"id": request.path_params["n"]}, status_code=201)

    async def boom(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")  # before answering

    metrics = Metrics()
    app = RequestMetrics(Starlette(routes=[Route("/items/{n}", item)]), metrics)
    client = TestClient(app)
    before = time.perf_counter()
    assert client.get("/items/1").status_code == 201
    within = time.perf_counter() - before
    first = metrics.registry.get_sample_value(
        "amaris_http_request_duration_seconds_sum",
        {"method": "GET", "route": "/items/{n}", "status": "201"},
    )
    # The time recorded is the request's own: inside the span the client saw it take.
    assert first is not None and 0 <= first <= within
    assert client.get("/items/2").status_code == 201
    assert client.post("/nowhere").status_code == 404
    with pytest.raises(RuntimeError):
        TestClient(RequestMetrics(boom, metrics)).get("/boom")
    assert _count(metrics, "GET", "/items/{n}", "201") == 2
    assert _count(metrics, "POST", "other", "404") == 1
    assert _count(metrics, "GET", "other", "500") == 1
    duration = metrics.registry.get_sample_value(
        "amaris_http_request_duration_seconds_count",
        {"method": "GET", "route": "/items/{n}", "status": "201"},
    )
    assert duration == 2
