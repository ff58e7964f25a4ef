"""The connections ``amaris serve`` holds: a deadline and a size limit for each request
head, and a connection budget that peers without the key cannot exhaust.

uvicorn's own cap (``limit_concurrency``) counts every open connection, so connections that
never finish a request head (a slow-loris), or that idle after a 401, fill it and every
request gets 503. Here (:class:`BudgetedProtocol`, uvicorn's httptools protocol with a
:class:`ConnectionBudget` shared by one server's connections):

- a connection *holds* a place in the budget while a request of it runs, and while it idles
  after a request that carried the key (any request, when no key is set): a trainer's
  pooled connection;
- every other connection *waits*: it has not delivered a head yet, or its last request was
  not authenticated. When one more connection than ``server.max_connections`` is open, the
  one that has waited longest is closed to make room, so a new connection is never refused
  for those;
- a request arriving while ``server.max_connections`` connections hold a place (its own
  included), or while that many requests run, gets uvicorn's 503;
- a head (request line and headers) must arrive whole ``server.head_timeout_seconds``
  after the connection opened or after the first byte of a request on a kept-alive
  connection, and within :data:`MAX_HEAD_BYTES`: else 408 (or 431), and the connection
  closes.
"""

from __future__ import annotations

import asyncio
import logging
from http import HTTPStatus
from typing import Any, ClassVar

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from amaris.models import ErrorDetail
from amaris.settings import Settings, secret_value
from api.errors import error_response
from api.middleware import bearer_matches

log = logging.getLogger("amaris.api")

MAX_HEAD_BYTES = 64 * 1024
"""Longest request head (request line and headers) taken in; a longer one gets 431."""

KEEP_ALIVE_SECONDS = 75
"""Longer than clients' pool keep-alive (httpx: 5 s), so the server never closes a
connection a client is about to reuse (a reset mid-request)."""


class ConnectionBudget:
    """The connections of one server: which hold a place, which wait (oldest first)."""

    def __init__(
        self, max_connections: int, head_timeout_seconds: float, api_key: str | None
    ) -> None:
        self.max_connections = max_connections
        self.head_timeout_seconds = head_timeout_seconds
        self.key = api_key.encode("utf-8") if api_key else None
        self.holding: set[BudgetedProtocol] = set()
        """Connections with a request running, or idle after an authenticated one."""
        self.waiting: dict[BudgetedProtocol, None] = {}
        """The other open connections, in the order they began waiting (oldest first)."""

    @property
    def open(self) -> int:
        return len(self.holding) + len(self.waiting)

    def authenticated(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether a request head carries the key (any head does when no key is set)."""
        if self.key is None:
            return True
        return any(
            name == b"authorization" and bearer_matches(value, self.key) for name, value in headers
        )

    def place(self, connection: BudgetedProtocol, holds: bool) -> None:
        """Record ``connection`` as holding a place, or as waiting (at the end of the line
        when it was not waiting already)."""
        if holds:
            self.waiting.pop(connection, None)
            self.holding.add(connection)
        else:
            self.holding.discard(connection)
            self.waiting.setdefault(connection, None)

    def forget(self, connection: BudgetedProtocol) -> None:
        self.holding.discard(connection)
        self.waiting.pop(connection, None)

    def make_room(self, newcomer: BudgetedProtocol) -> None:
        """Close the longest-waiting connections while more than the cap are open."""
        while self.open > self.max_connections:
            oldest = next(iter(self.waiting), newcomer)
            if oldest is newcomer:  # every other one holds a place: the newcomer stays over
                return
            oldest.evict()

    def over(self, tasks: int) -> bool:
        """Whether a request whose connection now holds a place gets 503."""
        return len(self.holding) >= self.max_connections or tasks >= self.max_connections


class BudgetedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a head deadline, a head size limit and
    :attr:`budget` (a subclass per server binds it: :func:`protocol_class`)."""

    budget: ClassVar[ConnectionBudget]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.busy = False
        """A request of this connection is running (its head arrived, its answer is not
        sent yet), or one is queued behind it (pipelined)."""
        self.trusted = False
        """The last request head carried the key."""
        self.head_bytes = 0
        """Bytes received since the current head began."""
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.budget.place(self, holds=False)
        self.arm_head_timer()
        self.budget.make_room(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.budget.forget(self)
        self.cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.head_bytes += len(data)
            if self.head_timer is None:  # the first byte of a request on a kept-alive connection
                self.arm_head_timer()
        super().data_received(data)
        if not self.busy and self.head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self.refuse(431, "request_header_fields_too_large", f"over {MAX_HEAD_BYTES} bytes")

    def on_headers_complete(self) -> None:
        self.cancel_head_timer()
        self.busy = True
        self.head_bytes = 0
        self.trusted = self.budget.authenticated(self.headers)
        self.budget.place(self, holds=True)
        # uvicorn answers 503 when its limit is reached: 0 always is, None never.
        self.limit_concurrency = 0 if self.budget.over(len(self.tasks)) else None
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        self.busy = self.cycle is not None and not self.cycle.response_complete
        self.budget.place(self, holds=self.busy or self.trusted)

    def arm_head_timer(self) -> None:
        self.head_timer = self.loop.call_later(
            self.budget.head_timeout_seconds, self.head_timed_out
        )

    def cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_timed_out(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        if self.head_bytes == 0:  # nothing sent yet: no request to answer
            self.close()
            return
        timeout = self.budget.head_timeout_seconds
        self.refuse(408, "request_timeout", f"not received within {timeout:g} s")

    def refuse(self, status: int, error: str, why: str) -> None:
        """Answer the head in progress with ``status`` (field ``headers``) and close."""
        message = f"request head {why}"
        log.info("%s from %s: %s; connection closed", status, self.peer(), message)
        response = error_response(status, error, [ErrorDetail(field="headers", message=message)])
        lines = [b"HTTP/1.1 %d %s" % (status, HTTPStatus(status).phrase.encode())]
        headers = [
            *self.server_state.default_headers,
            *response.raw_headers,
            (b"connection", b"close"),
        ]
        lines += [name + b": " + value for name, value in headers]
        self.transport.write(b"\r\n".join(lines) + b"\r\n\r\n" + response.body)
        self.close()

    def evict(self) -> None:
        """Close this waiting connection to make room for a new one."""
        log.debug(  # one per new connection while the cap is reached: not INFO
            "connection from %s closed to make room (server.max_connections %d open)",
            self.peer(),
            self.budget.max_connections,
        )
        self.close()

    def close(self) -> None:
        self.budget.forget(self)
        self.cancel_head_timer()
        self.transport.close()

    def peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "?"


def protocol_class(budget: ConnectionBudget) -> type[BudgetedProtocol]:
    """:class:`BudgetedProtocol` bound to ``budget``: one per server."""

    class Bound(BudgetedProtocol):
        pass

    Bound.budget = budget
    return Bound


def uvicorn_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    """How ``amaris serve`` runs ``app`` with uvicorn under ``settings``."""
    server = settings.server
    budget = ConnectionBudget(
        server.max_connections, server.head_timeout_seconds, secret_value(server.api_key)
    )
    return uvicorn.Config(
        app,
        host=server.host,
        port=server.port,
        log_level=settings.logging.level.lower(),
        timeout_graceful_shutdown=30,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        http=protocol_class(budget),
        # No WebSocket route: an upgrade would hand the connection to another protocol.
        ws="none",
        limit_concurrency=None,  # BudgetedProtocol enforces server.max_connections
    )
