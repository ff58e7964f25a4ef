"""Connections against the real uvicorn ``amaris serve`` runs (``amaris.app.connections``):
request heads that do not arrive in time or are too long, and a connection budget that
connections without a complete head, or without the key, cannot exhaust."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from amaris.app.connections import MAX_HEAD_BYTES, uvicorn_config
from amaris.app.running import free_port
from tests.support.app import in_memory_app
from tests.support.settings import make_settings

KEY = "s3cret"
AUTH = {"Authorization": f"Bearer {KEY}"}
WAIT_S = 15.0
"""Longest a test waits for what the server must do: generous, never a speed target."""
PARTIAL_HEAD = b"GET /rubrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"


@contextmanager
def served(tmp_path: Path, **overrides: Any) -> Iterator[str]:
    """The app of these settings (key set, logs quiet) under the uvicorn configuration of
    ``amaris serve``, on a free 127.0.0.1 port in a thread; yields its base URL."""
    port = free_port()
    settings = make_settings(
        tmp_path,
        **{
            "server.port": port,
            "server.api_key": KEY,
            "server.probe_judges_seconds": None,
            "logging.level": "ERROR",
            **overrides,
        },
    )
    server = uvicorn.Server(uvicorn_config(in_memory_app(settings), settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT_S)


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def request(path: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes] | None:
    """One answer (status, headers, body), or None when the server closed unanswered. Reads
    no byte past it: pipelined answers may arrive in one segment."""
    data = b""
    while not data.endswith(b"\r\n\r\n"):
        try:
            chunk = sock.recv(1)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            assert not data, f"closed mid-answer: {data!r}"
            return None
        data += chunk
    lines = data[:-4].decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    body = b""
    while len(body) < (size := int(headers.get("content-length", "0"))):
        body += sock.recv(size - len(body))
    return int(lines[0].split()[1]), headers, body


def closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset) within ``WAIT_S``; a socket
    timeout (still open) is False."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def trickle_until_answered(sock: socket.socket) -> tuple[int, dict[str, str], bytes] | None:
    """Send a header line every 0.1 s (a head that never ends) until the server answers or
    closes; fails when it does neither within ``WAIT_S``."""
    sock.settimeout(0.1)
    deadline = time.monotonic() + WAIT_S
    for index in range(10**6):
        assert time.monotonic() < deadline, "the server kept a trickled head open"
        try:
            sock.sendall(b"X-Slow-%d: 1\r\n" % index)
            sock.recv(65536, socket.MSG_PEEK)
        except TimeoutError:
            continue
        except OSError:
            return None  # closed (reset) before an answer
        sock.settimeout(WAIT_S)
        return read_answer(sock)
    raise AssertionError("unreachable")


# -- the head deadline and size limit ---------------------------------------------------------


def test_a_trickled_head_is_408_and_closed(tmp_path: Path) -> None:
    with served(tmp_path, **{"server.head_timeout_seconds": 0.5}) as url:
        sock = connect(url)
        sock.sendall(PARTIAL_HEAD)
        answer = trickle_until_answered(sock)
        assert answer is not None
        status, headers, body = answer
        assert (status, headers["connection"]) == (408, "close")
        assert json.loads(body) == {
            "error": "request_timeout",
            "detail": [{"field": "headers", "message": "request head not received within 0.5 s"}],
        }
        assert closed(sock)
        assert httpx.get(f"{url}/healthz").status_code == 200


def test_a_kept_alive_connection_idles_but_may_not_trickle_its_next_head(
    tmp_path: Path,
) -> None:
    with served(tmp_path, **{"server.head_timeout_seconds": 0.5}) as url:
        sock = connect(url)
        sock.sendall(request("/rubrics", AUTH))
        assert (read_answer(sock) or (0,))[0] == 200
        time.sleep(1.0)  # idle between requests: uvicorn's keep-alive, not the head deadline
        sock.sendall(request("/rubrics", AUTH))
        assert (read_answer(sock) or (0,))[0] == 200
        sock.sendall(PARTIAL_HEAD)
        answer = trickle_until_answered(sock)
        assert answer is not None and answer[0] == 408
        assert closed(sock)


def test_a_connection_that_sends_nothing_is_closed_unanswered(tmp_path: Path) -> None:
    with served(tmp_path, **{"server.head_timeout_seconds": 0.5}) as url:
        sock = connect(url)
        assert read_answer(sock) is None


def test_a_body_may_arrive_after_the_head_deadline(tmp_path: Path) -> None:
    # The head deadline ends with the head: the body has server.body_timeout_seconds.
    with served(tmp_path, **{"server.head_timeout_seconds": 0.5}) as url:
        sock = connect(url)
        body = b'{"rollout": {}}'
        head = [
            "POST /score HTTP/1.1",
            "Host: 127.0.0.1",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            f"Authorization: Bearer {KEY}",
        ]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        time.sleep(1.0)
        sock.sendall(body)
        answer = read_answer(sock)
        assert answer is not None and answer[0] == 422  # read and validated, not cut off


def test_a_head_over_the_size_limit_is_431(tmp_path: Path) -> None:
    with served(tmp_path) as url:
        sock = connect(url)
        sock.sendall(PARTIAL_HEAD + b"X-Big: " + b"a" * MAX_HEAD_BYTES + b"\r\n")
        answer = read_answer(sock)
        assert answer is not None
        assert answer[0] == 431 and json.loads(answer[2])["error"] == (
            "request_header_fields_too_large"
        )


def test_pipelined_requests_are_all_answered_and_the_connection_kept(tmp_path: Path) -> None:
    with served(tmp_path, **{"server.head_timeout_seconds": 0.5}) as url:
        sock = connect(url)
        sock.sendall(request("/healthz") + request("/rubrics", AUTH) + request("/rubrics"))
        statuses = [(read_answer(sock) or (0,))[0] for _ in range(3)]
        assert statuses == [200, 200, 401]
        time.sleep(1.0)  # longer than the head deadline: the connection idles, kept
        sock.sendall(request("/healthz"))
        assert (read_answer(sock) or (0,))[0] == 200


# -- the connection budget ------------------------------------------------------------------


def test_slow_heads_do_not_keep_authenticated_requests_out(tmp_path: Path) -> None:
    # A head deadline longer than the test: only the budget makes room.
    settings = {"server.max_connections": 20, "server.head_timeout_seconds": 60}
    with served(tmp_path, **settings) as url, ExitStack() as stack:
        slow = [stack.enter_context(connect(url)) for _ in range(40)]
        for sock in slow:
            sock.sendall(PARTIAL_HEAD)
        with httpx.Client(base_url=url, headers=AUTH) as client:
            assert client.get("/rubrics").status_code == 200
            assert client.get("/healthz").status_code == 200
        assert closed(slow[0])  # the longest waiting made room
        slow[-1].settimeout(0.5)
        assert not closed(slow[-1])


def test_connections_refused_for_the_key_do_not_keep_authenticated_requests_out(
    tmp_path: Path,
) -> None:
    with served(tmp_path, **{"server.max_connections": 20}) as url, ExitStack() as stack:
        refused = [stack.enter_context(connect(url)) for _ in range(40)]
        for sock in refused:
            sock.sendall(request("/rubrics"))
            answer = read_answer(sock)  # an early one may be closed as a later one comes
            assert answer is None or answer[0] == 401
        with httpx.Client(base_url=url, headers=AUTH) as client:
            assert client.get("/rubrics").status_code == 200


def test_authenticated_connections_still_count_against_the_cap(tmp_path: Path) -> None:
    with served(tmp_path, **{"server.max_connections": 2}) as url:
        first, second = connect(url), connect(url)
        first.sendall(request("/rubrics", AUTH))
        assert (read_answer(first) or (0,))[0] == 200
        second.sendall(request("/rubrics", AUTH))  # the first, idle, still holds its place
        assert (read_answer(second) or (0,))[0] == 503
        first.close()
        second.close()
