"""ASGI middleware: the request edge (id, Host, bearer key, body limits), request metrics."""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from amaris.logs import loggable
from amaris.metrics import Metrics
from amaris.models import ErrorDetail
from amaris.request_context import request_id_var
from api.errors import BodyError, error_response

log = logging.getLogger("amaris.api")

OPEN_PATHS = frozenset({"/healthz"})
"""The paths served without the bearer key."""

_SAFE_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")
"""A client's ``X-Request-ID`` is kept only when it matches: it is written in log lines."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: every other one must declare a JSON body, even an empty
one, which no cross-site form and no CORS-free ``fetch`` can."""


def bearer_matches(authorization: bytes, key: bytes) -> bool:
    """Whether an ``Authorization`` value is ``Bearer <key>`` (scheme in any case, blanks
    around the token ignored). Bytes compared in constant time: a token of any bytes is a
    mismatch, never an error."""
    scheme, _, token = authorization.partition(b" ")
    return scheme.lower() == b"bearer" and secrets.compare_digest(token.strip(), key)


def host_name(value: bytes) -> bytes | None:
    """The name a ``Host`` header value gives, without its port, in lower case and without a
    trailing dot (``[::1]`` keeps its brackets); None when the value is not ``name[:port]``.
    """
    value = value.lower()
    if value.startswith(b"["):
        end = value.find(b"]") + 1
        if end == 0:
            return None
        name, rest = value[:end], value[end:]
    else:
        name, colon, port = value.partition(b":")
        rest = colon + port
    if rest and not (rest[:1] == b":" and (len(rest) == 1 or rest[1:].isdigit())):
        return None
    return name.removesuffix(b".") or None


def is_json(content_type: bytes) -> bool:
    """Whether a ``Content-Type`` value is ``application/json`` or ``application/*+json``."""
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


class RequestGuard:
    """The edge of every HTTP request: what is decided before routing and before the body.

    From the headers alone, in this order: the request id (the client's ``X-Request-ID``
    when it is short and safe to log, else a new one), echoed on the response; a ``Host``
    that is not one of ``hosts`` (421: a web page that reaches the port through DNS
    rebinding sends its own name); the bearer key on every path but :data:`OPEN_PATHS`
    (401); a declared body over the limit (413); a body that is not JSON, or a request
    whose method is not in :data:`SAFE_METHODS` that does not declare JSON, body or none
    (415: what a cross-site form sends). Then the app routes the request (404 and 405
    read no body) and its handler reads the body through :class:`_BodyChannel`: over the
    limit, 413; not whole by the deadline, 408. A response sent before the whole body was
    read closes the connection, so the rest of the body is never taken in. No response
    carries a CORS header: a page of another origin reads none of them.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: frozenset[str],
        api_key: str | None,
        max_body_bytes: int,
        body_timeout_seconds: float,
    ) -> None:
        self.app = app
        self.hosts = frozenset(host.encode("ascii") for host in hosts)
        """The ``Host`` names served, as :func:`amaris.settings.host_key` writes them."""
        self.key = api_key.encode("utf-8") if api_key else None
        self.max_body_bytes = max_body_bytes
        self.body_timeout_seconds = body_timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorization = content_type = length = client_id = host = None
        chunked = False
        hosts = 0
        for name, value in scope["headers"]:  # ASGI header names are lower case
            if name == b"host":
                host = value
                hosts += 1
            elif name == b"authorization":
                authorization = value
            elif name == b"content-type":
                content_type = value
            elif name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"x-request-id":
                client_id = value
        if client_id is not None and _SAFE_REQUEST_ID.fullmatch(client_id):
            request_id = client_id.decode("ascii")
        else:
            request_id = uuid.uuid4().hex[:16]
        id_header = (b"x-request-id", request_id.encode("ascii"))
        declared = None
        if length is not None and length.isdigit():
            # More digits than any limit has: over it (and no int() of a huge string).
            declared = int(length) if len(length) <= 18 else self.max_body_bytes + 1
        body = (
            None
            if not chunked and (length is None or declared == 0)
            else _BodyChannel(receive, self.max_body_bytes, self.body_timeout_seconds)
        )

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [id_header]
                if body is not None and not body.done:
                    extra.append((b"connection", b"close"))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        token = request_id_var.set(request_id)
        try:
            if host is None or hosts > 1 or host_name(host) not in self.hosts:
                got = "none" if host is None else repr(host.decode("latin-1")[:100])
                await self._refuse(
                    scope,
                    send_with_id,
                    421,
                    "misdirected_request",
                    "Host",
                    f"this server does not answer the Host {got}"
                    + (f" ({hosts} Host headers)" if hosts > 1 else "")
                    + ": it answers localhost, 127.0.0.1, [::1], server.host and the names "
                    "in server.allowed_hosts",
                )
            elif (
                self.key is not None
                and scope["path"] not in OPEN_PATHS
                and (authorization is None or not bearer_matches(authorization, self.key))
            ):
                await self._refuse(
                    scope,
                    send_with_id,
                    401,
                    "unauthorized",
                    "Authorization",
                    "missing or wrong bearer key in the Authorization header",
                    {"WWW-Authenticate": "Bearer"},
                )
            elif declared is not None and declared > self.max_body_bytes:
                await self._refuse(
                    scope,
                    send_with_id,
                    413,
                    "payload_too_large",
                    "body",
                    f"request body is over server.max_body_bytes ({self.max_body_bytes})",
                )
            elif (body is not None or scope["method"] not in SAFE_METHODS) and (
                content_type is None or not is_json(content_type)
            ):
                got = content_type.decode("latin-1")[:100] if content_type else "none"
                what = (
                    "the request body must be JSON"
                    if body is not None
                    else f"a {scope['method']} must declare a JSON body, an empty one too"
                )
                await self._refuse(
                    scope,
                    send_with_id,
                    415,
                    "unsupported_media_type",
                    "Content-Type",
                    f"{what}: Content-Type application/json (or application/*+json), got {got!r}",
                )
            else:
                await self.app(scope, receive if body is None else body, send_with_id)
        finally:
            request_id_var.reset(token)

    async def _refuse(
        self,
        scope: Scope,
        send: Send,
        status: int,
        error: str,
        field: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        log.warning("%s %s %s: %s", status, scope["method"], loggable(scope["path"]), message)
        response = error_response(
            status, error, [ErrorDetail(field=field, message=message)], headers=headers
        )
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": response.raw_headers,
            }
        )
        await send({"type": "http.response.body", "body": response.body})


class _BodyChannel:
    """The request body as the app reads it (the ASGI ``receive`` of a request that has a
    body): refused once over ``limit`` bytes (413) or when it is not whole ``timeout``
    seconds after the request began (408), by raising :class:`~api.errors.BodyError` into
    the handler that reads it."""

    def __init__(self, receive: Receive, limit: int, timeout: float) -> None:
        self.receive = receive
        self.limit = limit
        self.timeout = timeout
        self.deadline = asyncio.get_running_loop().time() + timeout
        self.received = 0
        self.done = False
        """The whole body was read."""

    async def __call__(self) -> Message:
        if self.done:  # what follows the body (a disconnect) has no deadline
            return await self.receive()
        try:
            async with asyncio.timeout_at(self.deadline):
                message = await self.receive()
        except TimeoutError:
            raise BodyError(
                408,
                f"request body not received within "
                f"server.body_timeout_seconds ({self.timeout:g} s)",
            ) from None
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                raise BodyError(413, f"request body is over server.max_body_bytes ({self.limit})")
            self.done = not message.get("more_body", False)
        return message


class RequestMetrics:
    """Counts and times every HTTP request by method, route template and status.

    The route is the template of the route the router chose (``/rubrics/{version}``), not
    the raw path, so label values stay few. Requests no route took (404, 405, and 401, 413
    and 415 answered by :class:`RequestGuard` before routing) count as ``other``; a request
    that raised before answering counts as 500.
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
            self.metrics.observe_request(
                scope["method"], str(template or "other"), status, time.perf_counter() - started
            )
