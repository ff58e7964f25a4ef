"""A web page gets nothing from the amaris API, key or no key: a cross-site form post, a page
that reaches the port through DNS rebinding (a foreign ``Host``), a CORS preflight. Each is
sent as a browser sends it, to the real app (TestClient) and to a real uvicorn server."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from tests.support.app import in_memory_app
from tests.support.fake_llm import serve_in_thread
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

KEY = "s3cret"
FOREIGN = "rebind.evil.example"
"""A name whose owner made it resolve to 127.0.0.1: its page is "same-origin" with it."""
FORM_TYPES = [
    "application/x-www-form-urlencoded",  # <form method=POST>, no field
    "multipart/form-data; boundary=x",  # <form enctype=multipart/form-data>
    "text/plain",  # <form enctype=text/plain>, or fetch(url, {method: "POST", body: ""})
    None,  # fetch(url, {method: "POST", mode: "no-cors"})
]
WAIT_S = 30.0
"""How long a socket waits for the server's answer: generous, never asserted on."""


def rollout_body(rollout_id: str) -> dict[str, Any]:
    return {
        "rollout": {"id": rollout_id, "input": "2+2?", "output": "4", "supplemental_context": "4"},
        "metadata": {"current_step": 0},
    }


def app_for(tmp_path: Path, key: str | None = None, **overrides: Any) -> FastAPI:
    settings = make_settings(tmp_path, **{"server.api_key": key, **overrides})
    return in_memory_app(settings)


def auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def steps(client: TestClient, key: str | None) -> Any:
    return client.get("/steps", headers=auth(key)).json()


# -- a cross-site form --------------------------------------------------------------------------


@pytest.mark.usefixtures("prefect_harness")  # a completed step would run its pipeline
@pytest.mark.parametrize("key", [None, KEY])
@pytest.mark.parametrize("content_type", FORM_TYPES)
def test_a_cross_site_form_completes_and_reruns_nothing(
    tmp_path: Path, key: str | None, content_type: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    # What <form method=POST action="http://127.0.0.1:8002/complete"> sends from a page of
    # another site (an empty body, Origin null from a sandboxed frame). With a key, the page
    # cannot send it (401); the form is refused even when the request carries it.
    form = {"Origin": "null", "Content-Length": "0"}
    if content_type:
        form["Content-Type"] = content_type
    with TestClient(app_for(tmp_path, key)) as client:
        assert client.post("/score", json=rollout_body("r1"), headers=auth(key)).status_code == 200
        assert steps(client, key) == [{"step": 0, "status": "open", "rubric": None}]
        with caplog.at_level("WARNING", logger="amaris.api"):
            for path in ("/complete", "/steps/0/rerun"):
                if key:
                    assert client.post(path, content=b"", headers=form).status_code == 401
                refused = client.post(path, content=b"", headers={**form, **auth(key)})
                assert refused.status_code == 415, (path, refused.text)
                assert refused.json()["error"] == "unsupported_media_type"
                assert [d["field"] for d in refused.json()["detail"]] == ["Content-Type"]
                assert "a POST must declare a JSON body" in refused.json()["detail"][0]["message"]
                assert steps(client, key) == [{"step": 0, "status": "open", "rubric": None}]
        assert "415 POST '/complete': a POST must declare a JSON body" in caplog.text
        assert "415 POST '/steps/0/rerun'" in caplog.text
        # RewardClient's way (and any trainer's): a JSON type, with or without a body.
        typed = {"Content-Type": "application/json", **auth(key)}
        assert client.post("/steps/0/rerun", headers=typed).json() == {"step": 0, "status": "open"}


# -- DNS rebinding: a foreign Host ---------------------------------------------------------------


@pytest.mark.parametrize("key", [None, KEY])
def test_a_foreign_host_reads_and_scores_nothing(
    tmp_path: Path, key: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    with TestClient(app_for(tmp_path, key)) as client:
        assert client.post("/score", json=rollout_body("r1"), headers=auth(key)).status_code == 200
        with caplog.at_level("WARNING", logger="amaris.api"):
            for host in (FOREIGN, f"{FOREIGN}:8002"):
                foreign = {"Host": host, **auth(key)}
                read = client.get("/steps/0/rollouts", headers=foreign)
                scored = client.post("/score", json=rollout_body("r2"), headers=foreign)
                for r in (read, scored):
                    assert r.status_code == 421, r.text
                    assert r.json()["error"] == "misdirected_request"
                    assert r.json()["detail"][0]["field"] == "Host"
                    assert f"does not answer the Host {host!r}" in r.json()["detail"][0]["message"]
                    assert "r1" not in r.text
        assert f"421 GET '/steps/0/rollouts': this server does not answer the Host '{FOREIGN}'" in (
            caplog.text
        )
        assert f"421 POST '/score': this server does not answer the Host '{FOREIGN}'" in (
            caplog.text
        )
        listed = client.get("/steps/0/rollouts", headers=auth(key)).json()
        assert [r["rollout"]["id"] for r in listed["records"]] == ["r1"]  # r2 never logged
        assert client.get("/healthz").json()["counters"].get("scored") == 1


SERVED = [
    "127.0.0.1",
    "127.0.0.1:8002",
    "localhost",
    "LocalHost:31337",
    "localhost.",
    "[::1]",
    "[::1]:8002",
    "amaris.internal",
    "Amaris.Internal:443",
    "10.1.2.3:8002",
    "[fd00::7]:8002",
]
NOT_SERVED = [
    FOREIGN,
    "amaris.internal.evil.example",
    "evil.localhost",
    "localhost.evil.example",
    "127.0.0.2",
    "10.1.2.4",
    "[::2]",
    "testserver",
    "localhost:x",
    "localhost:80:80",
    "[::1",
    "[::1]x",
]


@pytest.mark.parametrize("key", [None, KEY])
def test_the_hosts_it_serves_are_answered_and_no_other(tmp_path: Path, key: str | None) -> None:
    listed = ["amaris.internal", "10.1.2.3", "FD00:0::7"]
    with TestClient(app_for(tmp_path, key, **{"server.allowed_hosts": listed})) as client:
        for host in SERVED:
            assert client.get("/steps", headers={"Host": host, **auth(key)}).json() == [], host
        for host in NOT_SERVED:
            r = client.get("/steps", headers={"Host": host, **auth(key)})
            assert r.status_code == 421, host
        # /healthz too: a rebinding page would read the judge's address in it.
        assert client.get("/healthz", headers={"Host": FOREIGN}).status_code == 421


# -- CORS ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, KEY])
def test_no_origin_is_allowed_to_read_an_answer(tmp_path: Path, key: str | None) -> None:
    preflight = {
        "Origin": "http://evil.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization",
    }
    with TestClient(app_for(tmp_path, key)) as client:
        for path in ("/score", "/complete", "/steps/0/rollouts"):
            answer = client.options(path, headers=preflight)
            assert answer.status_code >= 400
            assert not [h for h in answer.headers if h.lower().startswith("access-control-")]
        simple = client.get("/healthz", headers={"Origin": "http://evil.example"})
        assert simple.status_code == 200
        assert not [h for h in simple.headers if h.lower().startswith("access-control-")]


# -- the same, byte for byte, to a real server --------------------------------------------------


def exchange(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as raw bytes to the server at ``url``: status, headers, body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"closed before answering: {data!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        while len(body) < int(headers.get("content-length", 0)):
            chunk = sock.recv(65536)
            assert chunk
            body += chunk
    return int(lines[0].split()[1]), headers, body


def test_a_real_server_answers_a_browser_nothing(tmp_path: Path) -> None:
    with serve_in_thread(app_for(tmp_path)) as url:
        port = url.rsplit(":", 1)[1]
        status, _, _ = exchange(
            url,
            b"POST /score HTTP/1.1\r\nHost: 127.0.0.1:" + port.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: "
            + str(len(json.dumps(rollout_body("r1")))).encode()
            + b"\r\n\r\n"
            + json.dumps(rollout_body("r1")).encode(),
        )
        assert status == 200
        form = (
            b"POST /complete HTTP/1.1\r\nHost: 127.0.0.1:" + port.encode() + b"\r\n"
            b"Origin: null\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 0\r\n\r\n"
        )
        status, _, body = exchange(url, form)
        assert (status, json.loads(body)["detail"][0]["field"]) == (415, "Content-Type")
        rebound = (
            f"GET /steps/0/rollouts HTTP/1.1\r\nHost: {FOREIGN}:{port}\r\n"
            f"Origin: http://{FOREIGN}:{port}\r\n\r\n"
        ).encode()
        status, headers, body = exchange(url, rebound)
        assert (status, json.loads(body)["error"]) == (421, "misdirected_request")
        assert b"r1" not in body and "access-control-allow-origin" not in headers
        # HTTP/1.0 may leave out the Host: no name, no answer.
        status, _, body = exchange(url, b"GET /steps/0/rollouts HTTP/1.0\r\n\r\n")
        assert status == 421 and b"r1" not in body
        status, _, body = exchange(
            url,
            b"GET /steps HTTP/1.1\r\nHost: localhost\r\nHost: " + FOREIGN.encode() + b"\r\n\r\n",
        )
        assert status in (400, 421) and b"open" not in body  # uvicorn or amaris refuses it
        status, _, body = exchange(
            url, f"GET /steps/0/rollouts HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode()
        )
        assert status == 200 and b'"r1"' in body
        assert (
            exchange(url, f"GET /steps HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n".encode())[2]
            == json.dumps(
                [{"step": 0, "status": "open", "rubric": None}], separators=(",", ":")
            ).encode()
        )
