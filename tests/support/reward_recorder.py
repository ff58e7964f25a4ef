"""A local HTTP server standing in for amaris's ``/get_reward`` in the adapters' unit tests:
it answers scripted JSON in order and records each request (path, headers, body), so a test
checks exactly what an adapter sent and how it read the answers. The adapters' contract
tests (tests/trainers/test_contract_*.py) run them against the real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.local_http import serving


@dataclass
class Recorder:
    """The answers to give, ``(status, JSON, headers)`` in order, and the requests seen."""

    answers: list[tuple[int, Any, dict[str, str]]]
    requests: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    """The client's port of each request: one port for several requests is one connection
    kept open (the server speaks HTTP/1.1, keep-alive)."""

    @property
    def bodies(self) -> list[Any]:
        return [body for _, _, body in self.requests]

    def sent(self) -> list[tuple[dict[str, str], Any]]:
        """Each request's headers (names lower-cased) and body."""
        return [({k.lower(): v for k, v in h.items()}, body) for _, h, body in self.requests]

    def header(self, name: str) -> list[str | None]:
        """Header ``name`` of each request (None where it was not sent)."""
        return [headers.get(name) for _, headers, _ in self.requests]


def reward_answer(
    rewards: list[float | None],
    *,
    step: int = 0,
    statuses: list[str] | None = None,
    versions: list[int | None] | None = None,
    detail: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A ``/get_reward`` answer as the server gives it."""
    return {
        "rewards": rewards,
        "scores": rewards,
        "statuses": statuses or ["scored" if r is not None else "unscored" for r in rewards],
        "extra_logs": {"amaris_rubric_version": versions or [1] * len(rewards)},
        "step": step,
        "detail": detail or [],
    }


@contextmanager
def recording_server(recorder: Recorder) -> Iterator[str]:
    """The server's URL while it runs (127.0.0.1, a free port)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            recorder.requests.append((self.path, dict(self.headers), body))
            recorder.ports.append(self.client_address[1])
            code, data, headers = recorder.answers.pop(0)
            raw = data if isinstance(data, bytes) else json.dumps(data).encode()
            self.send_response(code)
            for name, value in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        yield url
