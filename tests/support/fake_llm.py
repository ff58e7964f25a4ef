"""A fake OpenAI-compatible server on 127.0.0.1 with scripted replies and fault injection.

It is the real ``amaris.sim.judge_server`` app (real uvicorn, real HTTP) around a
scripted responder, so the gateway is exercised through the ``openai`` SDK exactly
as in production. Every request body is recorded for assertions on prompts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from amaris.app.running import free_port
from amaris.offline.judge import respond
from amaris.sim.judge_server import Reply, create_llm_app, offline_models

Script = Reply | Callable[[dict[str, Any]], Reply]


def offline_reply(body: dict[str, Any]) -> Reply:
    """What the offline judge would answer."""
    return Reply(content=respond(body["messages"]))


def token_logprobs(pieces: list[str | dict[str, float]]) -> tuple[str, list[dict[str, Any]]]:
    """Content and ``logprobs.content`` from pieces: a string is text the model is sure of
    (split into word and punctuation tokens, logprob 0), a mapping is one token position:
    token -> probability, the most likely one chosen, all of them its ``top_logprobs``."""
    tokens: list[dict[str, Any]] = []
    for piece in pieces:
        if isinstance(piece, str):
            for text in re.findall(r"\s+|\w+|[^\w\s]", piece):
                tokens.append(
                    {
                        "token": text,
                        "logprob": 0.0,
                        "top_logprobs": [{"token": text, "logprob": 0.0}],
                    }
                )
            continue
        top = sorted(piece.items(), key=lambda item: -item[1])
        tokens.append(
            {
                "token": top[0][0],
                "logprob": math.log(top[0][1]),
                "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in top],
            }
        )
    return "".join(t["token"] for t in tokens), tokens


def verdicts_with_logprobs(
    *verdicts: tuple[str, dict[int, float]], reason: str = "ok", score_first: bool = False
) -> Reply:
    """A judge reply whose score tokens carry ``top_logprobs``: one (criterion id,
    score -> probability) per verdict; the token is the most likely score."""
    pieces: list[str | dict[str, float]] = ['{"verdicts": [']
    for index, (cid, distribution) in enumerate(verdicts):
        score = {str(s): p for s, p in distribution.items()}
        head = f'{", " if index else ""}{{"id": {json.dumps(cid)}, '
        quoted = f'"reason": {json.dumps(reason)}'
        if score_first:
            pieces += [head + '"score": ', score, f", {quoted}}}"]
        else:
            pieces += [f'{head}{quoted}, "score": ', score, "}"]
    pieces.append("]}")
    content, tokens = token_logprobs(pieces)
    return Reply(content=content, logprobs=tokens)


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
        """Forget the script, the default responder and the recorded requests."""
        self.script.clear()
        self.default = offline_reply
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
            return Reply(
                status=400,
                content=f"response_format type "
                f"{response_format['type']!r} is not supported by this server",
            )
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
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        access_log=False,
        timeout_graceful_shutdown=1,
    )
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
