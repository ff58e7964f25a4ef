"""An OpenAI-compatible ``/v1/chat/completions`` server around a responder.

``amaris offline-llm`` serves the offline judge with injectable latency and faults
(errors, timeouts, malformed JSON) and, optionally, rate limits it enforces
(:mod:`amaris.sim.rate_limit`), for dry runs of a training pipeline and for load, fault
and rate-limit tests. Tests build the same app around a scripted responder.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from amaris.agents.prompts import read_data
from amaris.offline.judge import OfflineJudgeError, respond
from amaris.offline.sampling import TokenLogprob, VerdictSampler
from amaris.sim.wire import (
    AnswerMessage,
    AnswerUsage,
    ChatAnswer,
    ChatRequest,
    ModelCard,
    ModelList,
)


@dataclass
class Reply:
    """What the server does for one request: answer ``content``, fail, or hang."""

    content: str | None = None
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with the response, an answer's or an error's."""
    hang: bool = False
    reasoning: str | None = None
    """Sent as ``message.reasoning_content`` (a reasoning model's separate field)."""
    finish_reason: str = "stop"
    reasoning_tokens: int | None = None
    """Sent as ``usage.completion_tokens_details.reasoning_tokens``."""
    prompt_tokens: int | None = None
    """Sent as ``usage.prompt_tokens``; None = a quarter of the prompt's characters."""
    completion_tokens: int | None = None
    """Sent as ``usage.completion_tokens``; None = a quarter of the answer's characters."""
    cached_tokens: int | None = None
    """Sent as ``usage.prompt_tokens_details.cached_tokens``."""
    usage: bool = True
    """False: the response has no ``usage`` (as some servers answer)."""
    logprobs: list[TokenLogprob] | None = None
    """Sent as ``choices[0].logprobs.content`` (tokens with ``top_logprobs``)."""
    body: bytes | Iterator[bytes] | None = None
    """Sent as the whole response body, as is, with ``status`` (a fault: a huge, malformed
    or non-standard body, such as NaN logprobs or a lone surrogate escape); pieces from an
    iterator are streamed without a length (chunked)."""


Responder = Callable[[ChatRequest], Awaitable[Reply]]
"""Answers a chat request (its body as the client sent it: :class:`ChatRequest` names
the fields the simulator's responders read)."""


@dataclass
class FaultProfile:
    """Latency and fault rates of the offline LLM server; rates are in [0, 1]."""

    latency_ms: float = 0.0
    error_rate: float = 0.0
    timeout_rate: float = 0.0
    malformed_rate: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class ScorerRequest:
    """A scorer's request as the simulator's judges that answer it their own way read it
    (:mod:`amaris.sim.drift`'s lenient judge, :mod:`amaris.sim.noisy_judge`'s auditor)."""

    output: str
    """The rollout's reply."""
    criteria: tuple[tuple[str, str | None], ...]
    """``(text, kind)`` of each criterion, in the request's order."""
    honest: tuple[tuple[str, str | None, int], ...]
    """The offline judge's ``(id, reason, score)`` for each criterion, in that order."""

    def answer(self, changed: dict[int, tuple[str | None, int]]) -> str:
        """The verdicts as JSON: the honest ones, but ``changed[i] = (reason, score)`` for
        the ``i``-th criterion."""
        verdicts = []
        for i, (cid, reason, score) in enumerate(self.honest):
            reason, score = changed.get(i, (reason, score))
            verdicts.append({"id": cid, "reason": reason, "score": score})
        return json.dumps({"verdicts": verdicts})


def scorer_request(body: ChatRequest) -> ScorerRequest | None:
    """``body`` read as a scorer's request; None for another agent's, or a body without an
    agent's data block."""
    try:
        messages = body.get("messages") or []
        data = read_data(messages)
    except ValueError:
        return None
    if data.get("agent") != "scorer":
        return None
    honest = json.loads(respond(messages))["verdicts"]
    criteria = tuple((str(c["text"]), c.get("kind")) for c in data["criteria"])
    if len(honest) != len(criteria):
        raise ValueError(f"the offline judge gave {len(honest)} verdicts for {len(criteria)}")
    return ScorerRequest(
        output=str((data.get("rollout") or {}).get("output") or ""),
        criteria=criteria,
        honest=tuple((str(v["id"]), v.get("reason"), int(v["score"])) for v in honest),
    )


def offline_responder(profile: FaultProfile) -> Responder:
    """The offline judge with ``profile``'s latency and faults.

    A scorer request with a ``temperature`` above 0 gets sampled verdicts, and one with
    ``logprobs: true`` the tokens' logprobs (``top_logprobs`` of them at each score), both
    seeded by ``profile.seed`` (:mod:`amaris.offline.sampling`).
    """
    rng = random.Random(profile.seed)
    sampler = VerdictSampler(profile.seed)

    def answer(body: ChatRequest) -> tuple[str, list[TokenLogprob] | None]:
        messages = body.get("messages") or []
        sampled = sampler.reply(
            messages,
            float(body.get("temperature") or 0.0),
            body.get("logprobs") is True,
            int(body.get("top_logprobs") or 1),
        )
        if sampled is None:
            return respond(messages), None
        return sampled.content, sampled.logprobs

    async def responder(body: ChatRequest) -> Reply:
        delay = profile.latency_ms / 1000.0
        draw = rng.random()
        if draw < profile.error_rate:
            return Reply(status=500, content="injected server error", delay_s=delay)
        draw -= profile.error_rate
        if draw < profile.timeout_rate:
            return Reply(hang=True)
        draw -= profile.timeout_rate
        started = time.monotonic()
        try:
            # With a latency to keep, the rules run off the loop: a burst of requests does
            # not queue behind each other's rule work, as at an endpoint of fixed latency.
            if delay:
                content, logprobs = await asyncio.to_thread(answer, body)
            else:
                content, logprobs = answer(body)
        except OfflineJudgeError as exc:
            return Reply(status=400, content=str(exc), delay_s=delay)
        if draw < profile.malformed_rate:
            content = "Sure! Here is my verdict: " + content[: max(1, len(content) // 2)]
            logprobs = None
        # The latency is the whole answer time, the rules' own work included (tens of ms
        # for a long update request), as for an LLM of fixed latency.
        return Reply(
            content=content,
            delay_s=max(0.0, delay - (time.monotonic() - started)),
            logprobs=logprobs,
        )

    return responder


def usage_tokens(body: ChatRequest, reply: Reply) -> tuple[int, int]:
    """The ``(prompt, completion)`` tokens the server reports for ``reply`` to ``body``:
    the reply's own, else a quarter of the prompt's and of the answer's characters."""
    prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
    prompt = prompt_chars // 4 if reply.prompt_tokens is None else reply.prompt_tokens
    content = reply.content or ""
    completion = len(content) // 4 if reply.completion_tokens is None else reply.completion_tokens
    return prompt, completion


def offline_models() -> list[ModelCard]:
    """``/v1/models`` of the offline judge: one model, no context window."""
    return [{"id": "offline-rules", "object": "model"}]


def create_llm_app(
    responder: Responder, models: Callable[[], list[ModelCard]] = offline_models
) -> FastAPI:
    """FastAPI app speaking the chat-completions protocol; records nothing itself.

    ``models()`` gives the ``data`` of ``GET /v1/models`` (vLLM adds ``max_model_len``).
    """
    app = FastAPI(title="amaris offline LLM")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body: ChatRequest = await request.json()
        reply = await responder(body)
        if reply.hang:
            # A timeout fault: answer nothing for far longer than any client waits.
            await asyncio.sleep(3600)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if isinstance(reply.body, bytes):
            return Response(reply.body, status_code=reply.status, media_type="application/json")
        if reply.body is not None:
            return StreamingResponse(
                reply.body, status_code=reply.status, media_type="application/json"
            )
        if reply.status != 200:
            return JSONResponse(
                {"error": {"message": reply.content or "error", "type": "server_error"}},
                status_code=reply.status,
                headers=reply.headers,
            )
        content = reply.content or ""
        message: AnswerMessage = {"role": "assistant", "content": content}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        prompt, completion = usage_tokens(body, reply)
        usage: AnswerUsage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if reply.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
        if reply.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
        answer: ChatAnswer = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "offline-rules"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason,
                    "logprobs": None if reply.logprobs is None else {"content": reply.logprobs},
                }
            ],
        }
        if reply.usage:
            answer["usage"] = usage
        return JSONResponse(answer, headers=reply.headers)

    @app.get("/v1/models")
    async def list_models() -> JSONResponse:
        listing: ModelList = {"object": "list", "data": models()}
        return JSONResponse(listing)

    return app
