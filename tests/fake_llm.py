"""A fake OpenAI-compatible server on 127.0.0.1 with scripted replies and fault injection.

It is the real ``amaris.offline.server`` app (real uvicorn, real HTTP) around a
scripted responder, so the gateway is exercised through the ``openai`` SDK exactly
as in production. Every request body is recorded for assertions on prompts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from amaris.offline.judge import respond
from amaris.offline.server import Reply, create_llm_app, offline_models
from amaris.prefect_server import free_port

Script = Reply | Callable[[dict[str, Any]], Reply]


def offline_reply(body: dict[str, Any]) -> Reply:
    """What the offline judge would answer."""
    return Reply(content=respond(body["messages"]))


@dataclass
class FakeLLM:
    """Scripted replies are consumed in order; when the script is empty, ``default`` answers.

    A request whose ``response_format`` type is in ``refuse_formats`` gets a 400 naming
    ``response_format`` instead (before the script), as servers without that mode answer.
    ``GET /v1/models`` lists ``models`` and counts ``model_requests``.
    """

    script: list[Script] = field(default_factory=list)
    default: Callable[[dict[str, Any]], Reply] = offline_reply
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    refuse_formats: set[str] = field(default_factory=set)
    models: list[dict[str, Any]] = field(default_factory=offline_models)
    model_requests: int = 0
    url: str = ""

    def push(self, *replies: Script) -> None:
        """Queue replies for the next requests."""
        self.script.extend(replies)

    def reset(self) -> None:
        """Forget the script and the recorded requests."""
        self.script.clear()
        self.requests.clear()
        self.refuse_formats.clear()
        self.max_in_flight = 0
        self.models = offline_models()
        self.model_requests = 0

    def _models(self) -> list[dict[str, Any]]:
        self.model_requests += 1
        return self.models

    async def _respond(self, body: dict[str, Any]) -> Reply:
        self.requests.append(body)
        response_format = body.get("response_format") or {}
        if response_format.get("type") in self.refuse_formats:
            return Reply(status=400, content=f"response_format type "
                         f"{response_format['type']!r} is not supported by this server")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            step = self.script.pop(0) if self.script else self.default
            reply = step(body) if callable(step) else step
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
                reply = dataclasses.replace(reply, delay_s=0.0)
            return reply
        finally:
            self.in_flight -= 1


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Serve an ASGI app with real uvicorn on a free 127.0.0.1 port; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                            access_log=False, timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def running_fake_llm() -> Iterator[FakeLLM]:
    """Start the fake on a free 127.0.0.1 port in a thread; stop it on exit."""
    fake = FakeLLM()
    with serve_in_thread(create_llm_app(fake._respond, fake._models)) as url:
        fake.url = f"{url}/v1"
        yield fake
