"""ASGI middleware: request ids, the request body size limit, request metrics."""

from __future__ import annotations

import itertools
import json
import logging
import secrets
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from amaris.context import request_id_var
from amaris.metrics import Metrics

log = logging.getLogger("amaris.api")


_ID_PREFIX = secrets.token_hex(4)
_id_counter = itertools.count(1)


def _next_request_id() -> str:
    """16 hex digits: this process's random prefix and a counter (uuid4 reads the OS's
    random source on every call, a syscall per request on the hot path)."""
    return f"{_ID_PREFIX}{next(_id_counter) & 0xFFFFFFFF:08x}"


class RequestGuard:
    """Tags every request with an id (``X-Request-ID``) and refuses bodies over a limit.

    The body is read here, up to the limit, before the app sees it, so an oversized
    request is answered 413 without being parsed and without touching any state.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        request_id = headers.get("x-request-id") or _next_request_id()
        token = request_id_var.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"],
                                      (b"x-request-id", request_id.encode("latin-1"))]
            await send(message)

        try:
            declared = headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                await self._too_large(scope, send_with_id, int(declared))
                return
            body = bytearray()
            more = True
            while more and scope["method"] in {"POST", "PUT", "PATCH"}:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body.extend(message.get("body", b""))
                more = message.get("more_body", False)
                if len(body) > self.max_body_bytes:
                    await self._too_large(scope, send_with_id, len(body))
                    return
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": bytes(body), "more_body": False}
                return await receive()

            await self.app(scope, replay if body or scope["method"] in {"POST", "PUT", "PATCH"}
                           else receive, send_with_id)
        finally:
            request_id_var.reset(token)

    async def _too_large(self, scope: Scope, send: Send, size: int) -> None:
        log.warning("413 %s %s: body of %s bytes over the limit of %s", scope["method"],
                    scope["path"], size, self.max_body_bytes)
        payload: dict[str, Any] = {
            "error": "payload_too_large",
            "detail": [{"field": "body", "message":
                        f"request body is over server.max_body_bytes ({self.max_body_bytes})"}],
        }
        data = json.dumps(payload).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})


class RequestMetrics:
    """Counts and times every HTTP request by method, route template and status.

    The route is the template of the route the router chose (``/rubrics/{version}``), not
    the raw path, so label values stay few. Requests no route took (404, 405, and 413
    answered by :class:`RequestGuard` before routing) count as ``other``; a request that
    raised before answering counts as 500.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            # The router records its choice in the scope (the same dict all the way down).
            template = getattr(scope.get("route"), "path_format", None)
            self.metrics.observe_request(scope["method"], str(template or "other"), status,
                                         time.perf_counter() - started)
