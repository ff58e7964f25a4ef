"""The request edge (``api.middleware.RequestGuard``): the bearer key on every route, JSON
bodies only, safe request ids, and bodies that are refused before, or while, they arrive.
What a web page sends (a foreign ``Host``, a cross-site form) is in tests/api/test_web_pages.py."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.routing import iter_route_contexts
from prefect.settings import PREFECT_API_URL

from amaris.app.running import free_port
from tests.support.api import NOOP
from tests.support.app import in_memory_app
from tests.support.fake_llm import serve_in_thread
from tests.support.procs import amaris_process
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

KEY = "s3cret"
SCORE_BODY: dict[str, Any] = {
    "rollout": {"id": "r1", "input": "What is 2+2?", "output": "4", "supplemental_context": "4"}
}
WAIT_S = 30.0
"""How long a socket waits for the server's answer: generous, never asserted on."""


@contextmanager
def serve(**overrides: Any) -> Iterator[TestClient]:
    app = in_memory_app(make_settings(overrides.pop("tmp_path"), **overrides))
    with TestClient(app) as client:
        yield client


def counters(client: TestClient) -> dict[str, int]:
    result: dict[str, int] = client.get("/healthz").json()["counters"]
    return result


# -- the bearer key, on every route -------------------------------------------------------------


def _concrete(path: str) -> str:
    """A route's path with every ``{parameter}`` filled in."""
    return re.sub(r"\{[^}]+\}", "1", path)


def test_every_route_but_healthz_needs_the_key(tmp_path: Path) -> None:
    # Every route the app has, including those a future router adds: one mounted without
    # the key check fails here.
    app = in_memory_app(make_settings(tmp_path, **{"server.api_key": KEY}))
    checked: set[str] = set()
    with TestClient(app) as client:
        for route in iter_route_contexts(app.routes):  # included routers' routes too
            assert route.path is not None
            assert route.methods, f"{route.path}: not an HTTP route, whose key check this misses"
            for method in sorted(route.methods or ()):
                path = _concrete(route.path)
                for headers in ({}, {"Authorization": "Bearer wrong"}):
                    r = client.request(method, path, headers=headers)
                    if route.path == "/healthz":
                        assert r.status_code == 200, (method, path)
                        continue
                    assert r.status_code == 401, (method, path)
                    assert r.headers["WWW-Authenticate"] == "Bearer"
                    if method != "HEAD":
                        assert r.json()["detail"][0]["field"] == "Authorization"
                checked.add(route.path)
        assert client.post("/nowhere", json={}).status_code == 401
        assert counters(client) == {}
    assert {
        "/score",
        "/batch_score",
        "/get_reward",
        "/complete",
        "/rubric_status/wait",
        "/steps/{step}/rerun",
        "/metrics",
        "/memory/search",
        "/openapi.json",
        "/docs",
        "/redoc",
        "/healthz",
    } <= checked


def test_the_key_opens_the_schema_and_the_docs(tmp_path: Path) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    with serve(tmp_path=tmp_path, **{"server.api_key": KEY}) as client:
        schema = client.get("/openapi.json", headers=auth)
        assert schema.status_code == 200
        assert "/score" in schema.json()["paths"]
        assert client.get("/docs", headers=auth).status_code == 200
        assert client.get("/redoc", headers=auth).status_code == 200


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer s3crét".encode(),
        "Bearer ключ".encode(),
        b"Bearer \xff\xfe",
        b"Bearer s3cret\x00",
        b"\xff s3cret",
        "Bearer s3cret\u2028".encode(),
    ],
)
def test_a_token_of_any_bytes_is_a_401(tmp_path: Path, authorization: bytes) -> None:
    with serve(tmp_path=tmp_path, **{"server.api_key": KEY}) as client:
        r = client.post("/score", json=SCORE_BODY, headers={"Authorization": authorization})
        assert r.status_code == 401
        assert r.json()["error"] == "unauthorized"
        assert client.get("/healthz", headers={"Authorization": authorization}).status_code == 200
        assert counters(client) == {}


def test_a_non_ascii_key_matches_its_utf8_bytes(tmp_path: Path) -> None:
    with serve(tmp_path=tmp_path, **{"server.api_key": "clé"}) as client:
        right = client.post(
            "/score", json=SCORE_BODY, headers={"Authorization": "Bearer clé".encode()}
        )
        assert right.status_code == 200
        assert (
            client.post(
                "/score", json=SCORE_BODY, headers={"Authorization": "Bearer cle"}
            ).status_code
            == 401
        )


# -- JSON bodies only ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "text/json",
    ],
)
@pytest.mark.parametrize("path", ["/score", "/batch_score", "/get_reward", "/complete"])
def test_a_body_that_is_not_json_is_415(
    tmp_path: Path, content_type: str | None, path: str
) -> None:
    # A cross-site form (text/plain, form types, or a typeless fetch body) cannot post here.
    headers = {"Content-Type": content_type} if content_type else {}
    body = {"items": [SCORE_BODY]} if path == "/batch_score" else SCORE_BODY
    with serve(tmp_path=tmp_path) as client:
        r = client.post(path, content=json.dumps(body), headers=headers)
        assert r.status_code == 415
        assert r.json()["error"] == "unsupported_media_type"
        assert [d["field"] for d in r.json()["detail"]] == ["Content-Type"]
        assert counters(client) == {}
        assert client.get("/steps").json() == []


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/vnd.amaris+json",
    ],
)
def test_json_content_types_are_accepted(tmp_path: Path, content_type: str) -> None:
    with serve(tmp_path=tmp_path) as client:
        r = client.post(
            "/score", content=json.dumps(SCORE_BODY), headers={"Content-Type": content_type}
        )
        assert r.status_code == 200
        assert r.json()["status"] == "scored"


def test_a_post_without_a_body_must_declare_json(tmp_path: Path) -> None:
    # A cross-site form posts an empty body too (tests/api/test_web_pages.py): an empty POST
    # is served only when it declares JSON, as RewardClient's does.
    with serve(tmp_path=tmp_path, **{"pipeline.rollouts_per_step": 5}) as client:
        for headers in (
            {"Content-Type": "application/json"},
            {"Content-Type": "application/json; charset=utf-8", "Content-Length": "0"},
        ):
            assert client.post("/complete", headers=headers).json() == NOOP
        assert client.post("/complete", json={}).json() == NOOP
        for headers in ({}, {"Content-Type": "text/plain"}):
            untyped = client.post("/complete", headers=headers)
            assert untyped.status_code == 415
            assert untyped.json()["detail"][0]["field"] == "Content-Type"


# -- request ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("request_id", ["trainer-42", "a" * 64, "run.7:step-3_x"])
def test_a_safe_request_id_is_kept(tmp_path: Path, request_id: str) -> None:
    with serve(tmp_path=tmp_path) as client:
        r = client.post("/score", json=SCORE_BODY, headers={"X-Request-ID": request_id})
        assert r.headers["X-Request-ID"] == request_id


@pytest.mark.parametrize(
    "request_id",
    [
        b"x] ERROR amaris.api [forged",
        b"a" * 65,
        b"a\tb",
        b"",
        "ü".encode(),
        b"a/b",
        b"a\x85b",
        "a\u2028b".encode(),
    ],
)
def test_an_unsafe_request_id_is_replaced(tmp_path: Path, request_id: bytes) -> None:
    # The id is written in every log line of the request: a free-form one forges lines.
    with serve(tmp_path=tmp_path) as client:
        r = client.get("/healthz", headers={"X-Request-ID": request_id})
    assert r.status_code == 200
    assert re.fullmatch(r"[0-9a-f]{16}", r.headers["X-Request-ID"])


@pytest.mark.parametrize("key", [KEY, None])
def test_a_request_path_cannot_forge_a_log_line(
    tmp_path: Path, key: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    # The path is percent-decoded before it is logged (a 401 at the edge, a 404 after
    # routing): an encoded line break would start a line of the client's choosing.
    forged = "/nowhere%0A2026-01-01 ERROR amaris.api forged%E2%80%A8line"
    with caplog.at_level("WARNING"), serve(tmp_path=tmp_path, **{"server.api_key": key}) as c:
        assert c.get(forged).status_code == (401 if key else 404)
    lines = [r.getMessage() for r in caplog.records if "nowhere" in r.getMessage()]
    assert lines, "the refusal is logged"
    assert all(not any(ch in line for ch in "\n\r\u2028\x85") for line in lines), lines


# -- bodies refused before, or while, they arrive (real uvicorn) --------------------------------


def _start(
    url: str, path: str, declared: int, sent: int, headers: dict[str, str] | None = None
) -> socket.socket:
    """A POST of ``path`` declaring a ``declared``-byte JSON body of which ``sent`` bytes
    are sent: a body that never completes."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=WAIT_S)
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json",
        f"Content-Length: {declared}",
    ]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + b" " * sent)
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], Any, bool]:
    """The server's answer (status, headers, JSON body) and whether it then closed the
    connection; a socket timeout (the server waits for the body) fails the test."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before answering: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(rest) < int(headers["content-length"]):
        rest += sock.recv(65536)
    closed = False
    try:
        closed = sock.recv(65536) == b""
    except ConnectionResetError:
        closed = True
    sock.close()
    return int(lines[0].split()[1]), headers, json.loads(rest), closed


def test_unauthenticated_and_unknown_requests_are_answered_without_their_body(
    tmp_path: Path,
) -> None:
    # Declared 3.9 MB, 1 kB sent: the answer comes from the headers alone, and the
    # connection closes, so the rest of the body is never taken in.
    keyed = in_memory_app(make_settings(tmp_path / "a", **{"server.api_key": KEY}))
    with serve_in_thread(keyed) as url:
        for path in ("/score", "/nowhere"):
            status, headers, body, closed = _answer(_start(url, path, 3_900_000, 1000))
            assert (status, body["error"], closed) == (401, "unauthorized", True), path
            assert headers["connection"] == "close"
    keyless = in_memory_app(make_settings(tmp_path / "b"))
    with serve_in_thread(keyless) as url:
        status, headers, body, closed = _answer(_start(url, "/nowhere", 3_900_000, 1000))
        assert (status, body["error"], closed) == (404, "not_found", True)
        status, _, body, closed = _answer(_start(url, "/score", 5_000_000, 1000))
        assert (status, body["detail"][0]["field"], closed) == (413, "body", True)


def test_a_body_that_does_not_arrive_in_time_is_408(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, **{"server.api_key": KEY, "server.body_timeout_seconds": 0.5}
    )
    app = in_memory_app(settings)
    with serve_in_thread(app) as url:
        sock = _start(url, "/score", 200, 10, {"Authorization": f"Bearer {KEY}"})
        status, headers, body, closed = _answer(sock)
        assert status == 408
        assert body == {
            "error": "request_timeout",
            "detail": [
                {
                    "field": "body",
                    "message": "request body not received within "
                    "server.body_timeout_seconds (0.5 s)",
                }
            ],
        }
        assert closed and headers["connection"] == "close"
        assert httpx.get(f"{url}/healthz").json()["counters"] == {}  # nothing scored


@pytest.mark.slow
def test_amaris_serve_caps_its_connections(
    tmp_path: Path, prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    # The session's Prefect server, no repair worker: the server boots no Prefect server of
    # its own (it runs no step).
    monkeypatch.setenv("PREFECT_API_URL", str(PREFECT_API_URL.value()))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(tmp_path / "data"), "embedding_model": "hashing"},
                "server": {"port": port, "max_connections": 2},
                "prefect": {"repair_interval_seconds": None},
            }
        )
    )
    url = f"http://127.0.0.1:{port}"
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    def healthz(sock: socket.socket) -> int:
        sock.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk
            data += chunk
        return int(data.split()[1])

    with amaris_process(
        ["serve", "--config", str(config)], tmp_path, f"{url}/healthz", tmp_path / "serve.log"
    ):
        # The readiness probe's connections may still count a moment: poll for the first.
        deadline = time.monotonic() + WAIT_S
        while True:
            first = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
            if healthz(first) == 200:
                break
            first.close()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        second = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        assert healthz(second) == 503  # the first connection is still open
        second.close()
        first.close()


@pytest.mark.parametrize("path", ["/batch_score", "/get_reward"])
def test_a_streamed_body_over_the_limit_is_413_on_every_route(tmp_path: Path, path: str) -> None:
    # No Content-Length: the limit holds while FastAPI's own body reading streams it.
    chunks = [b'{"items": [', b" " * 800, b"]}"]
    with serve(tmp_path=tmp_path, **{"server.max_body_bytes": 500}) as client:
        r = client.post(path, content=iter(chunks), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        assert r.json()["detail"] == [
            {"field": "body", "message": "request body is over server.max_body_bytes (500)"}
        ]
        assert counters(client) == {}


def test_a_content_length_of_any_size_is_413(tmp_path: Path) -> None:
    with serve(tmp_path=tmp_path) as client:
        r = client.post(
            "/score",
            content=b"{}",
            headers={"Content-Type": "application/json", "Content-Length": "9" * 5000},
        )
    assert r.status_code == 413
