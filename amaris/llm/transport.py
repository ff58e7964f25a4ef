"""A lean HTTP/1.1 client for the judge's chat-completion requests.

On the scoring hot path the ``openai`` SDK's request machinery was the largest cost amaris
added to a judge call (``docs/benchmarks.md``): building an ``httpx2`` request (URL
parsing, header objects, options models) and the default ``httpcore2`` transport (anyio
cancel scopes, socket-liveness probes, a scan of every pooled connection) cost 1.87 ms
of CPU a call at 64 in flight, against 0.21 ms here (``bench/judge_call_cpu.py``).
:class:`JsonEndpoint` posts the JSON body with the headers of an ``openai.AsyncOpenAI``
client (its auth, user agent and platform headers, computed once) over a keep-alive
pool parsed with ``httptools``, and raises the SDK's own exceptions: ``APIStatusError``
and its subclasses (built by the client, from the response), ``APITimeoutError``,
``APIConnectionError``.

Not covered, so :func:`lean_transport_applies` leaves those endpoints to the SDK's own
``post``: HTTP proxies from the environment, and URL schemes other than http(s).
Responses are read whole (no streaming), which is all a chat completion needs.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.request
import zlib
from collections.abc import Callable
from typing import Any, cast

import httptools
import httpx2
import openai

_KEEPALIVE_EXPIRY_S = 4.0
"""Idle connections older than this are not reused: uvicorn (vLLM) closes its idle ones
after 5 s, and a request sent as the server closes would fail."""


def lean_transport_applies(base_url: httpx2.URL) -> bool:
    """False when an environment proxy would apply to ``base_url`` (not handled here).

    ``base_url`` is the SDK client's resolved one (``OPENAI_BASE_URL`` when none is set).
    """
    if base_url.scheme not in ("http", "https"):
        return False
    proxies = urllib.request.getproxies()
    if not (proxies.get(base_url.scheme) or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass(base_url.host))


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self.got_bytes = False
        self._headers_done = False
        self._delimited = False
        self._timer: asyncio.TimerHandle | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.last_read = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.last_read = self._loop.time()
        if self._waiter is None:
            # Bytes nobody asked for: the connection is out of step; never reuse it.
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx2.RemoteProtocolError(f"malformed HTTP response: {exc}"))
            self.close()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost reports the end

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is None or self._waiter.done():
            return
        if self._headers_done and not self._delimited:
            self._message_done()  # the body ran to the end of the connection
        elif not self.got_bytes:
            self._fail(httpx2.RemoteProtocolError(
                "Server disconnected without sending a response."))
        else:
            self._fail(httpx2.ReadError(f"connection lost mid-response: {exc or 'EOF'}"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self.status = self._parser.get_status_code()
        self._delimited = any(name.lower() in (b"content-length", b"transfer-encoding")
                              for name, _ in self.headers)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self._message_done()

    # requests
    async def exchange(self, head: bytes, body: bytes, read_timeout: float | None) -> None:
        """Send one request and wait for its whole response (status, headers, body)."""
        assert self.transport is not None
        self._waiter = self._loop.create_future()
        self.got_bytes = self._headers_done = self._delimited = False
        self.status, self.headers, self.body = 0, [], []
        self.last_read = self._loop.time()
        self.transport.writelines((head, body))
        if read_timeout is not None:
            self._timer = self._loop.call_later(read_timeout, self._check_timeout, read_timeout)
        try:
            await self._waiter
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._waiter = None

    def _check_timeout(self, read_timeout: float) -> None:
        # One timer per request, pushed back while bytes keep arriving: the read timeout is
        # between bytes, as in httpx.
        if self._waiter is None or self._waiter.done():
            return
        quiet = self._loop.time() - self.last_read
        if quiet < read_timeout:
            self._timer = self._loop.call_later(read_timeout - quiet, self._check_timeout,
                                                read_timeout)
            return
        self._fail(httpx2.ReadTimeout(f"no response bytes for {read_timeout:g} s"))
        self.close()

    def _message_done(self) -> None:
        if not self._parser.should_keep_alive():
            self.closed = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)

    def close(self) -> None:
        """Drop the connection now (no graceful shutdown: it is never reused)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


Origin = tuple[str, str, int]
"""(scheme, host, port)."""


class ConnectionPool:
    """Keep-alive HTTP/1.1 connections, a pool of idle ones per origin.

    The number of connections is not capped here: the gateway's concurrency limits
    bound the requests in flight. At most ``max_idle`` idle connections per origin are
    kept. Errors are ``httpx2``'s (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
    ``ReadError``, ``RemoteProtocolError``).
    """

    def __init__(self, max_idle: int = 128) -> None:
        self._max_idle = max_idle
        self._ssl: ssl.SSLContext | None = None
        self._idle: dict[Origin, list[_Connection]] = {}

    async def request(self, origin: Origin, head: bytes, body: bytes,
                      timeout: float | None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send ``head`` (request line and headers, ending in a blank line) and ``body``.

        ``timeout`` bounds the connect and each wait for response bytes.

        Returns:
            The status, the raw headers and the whole body of the response.
        """
        connection = self._take_idle(origin)
        if connection is None:
            connection = await self._connect(origin, timeout)
        try:
            await connection.exchange(head, body, timeout)
        except BaseException:
            # Cancelled or failed mid-exchange: the connection's state is unknown. No resend
            # here: the gateway's retry layer owns every further attempt.
            connection.close()
            raise
        self._release(origin, connection)
        return connection.status, connection.headers, b"".join(connection.body)

    def _take_idle(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        oldest_usable = time.monotonic() - _KEEPALIVE_EXPIRY_S
        while idle:
            connection = idle.pop()
            transport = connection.transport
            if (connection.closed or transport is None or transport.is_closing()
                    or connection.idle_since < oldest_usable):
                connection.close()
                continue
            return connection
        return None

    def _release(self, origin: Origin, connection: _Connection) -> None:
        if connection.closed:
            connection.close()
            return
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= self._max_idle:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = httpx2.create_ssl_context()
            tls = self._ssl
        try:
            async with asyncio.timeout(timeout):
                _, protocol = await loop.create_connection(
                    lambda: _Connection(loop), host, port, ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except TimeoutError as exc:
            raise httpx2.ConnectTimeout(f"connecting to {host}:{port} took over "
                                        f"{timeout} s") from exc
        except OSError as exc:
            raise httpx2.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        return protocol

    def close(self) -> None:
        """Close every idle connection."""
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


class JsonEndpoint:
    """POSTs JSON under one ``openai.AsyncOpenAI`` client's base URL, with its headers.

    Errors are the SDK's: a non-2xx answer raises what the client itself raises for it
    (``openai.RateLimitError``, ``openai.InternalServerError``...), a timeout
    ``openai.APITimeoutError``, a failed or lost connection ``openai.APIConnectionError``.
    """

    def __init__(self, client: openai.AsyncOpenAI, pool: ConnectionPool) -> None:
        self._client = client
        self._pool = pool
        base = client.base_url
        self._base = str(base).rstrip("/")
        self._origin: Origin = (base.scheme, base.host,
                                base.port or (443 if base.scheme == "https" else 80))
        self._prefix = base.raw_path.split(b"?")[0].rstrip(b"/")
        headers = {k: v for k, v in client.default_headers.items() if isinstance(v, str)}
        headers.update(client.auth_headers)
        headers["Accept-Encoding"] = "identity"
        self._headers = b"".join(
            f"{name}: {value}\r\n".encode("latin-1")
            for name, value in {"Host": base.netloc.decode("ascii"), **headers}.items()
        )

    async def post(self, path: str, body: dict[str, Any], timeout: float | None) -> bytes:
        """POST ``body`` as JSON to ``<base_url>/<path>``; the response body of a 2xx."""
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        head = b"POST %s/%s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (
            self._prefix, path.encode("ascii"), self._headers, len(payload))
        try:
            status, headers, content = await self._pool.request(self._origin, head, payload,
                                                                 timeout)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=self._request(path)) from exc
        except httpx2.TransportError as exc:
            raise openai.APIConnectionError(message=f"Connection error: {exc}",
                                            request=self._request(path)) from exc
        content = _decode(headers, content, lambda: self._request(path))
        if not 200 <= status < 300:
            response = httpx2.Response(status, headers=headers, content=content,
                                       request=self._request(path))
            raise self._client._make_status_error_from_response(response)
        return content

    def _request(self, path: str) -> httpx2.Request:
        return httpx2.Request("POST", f"{self._base}/{path}")


def _decode(headers: list[tuple[bytes, bytes]], content: bytes,
            request: Callable[[], httpx2.Request]) -> bytes:
    # Asked for identity; a server that compresses anyway gets decoded here.
    for name, value in headers:
        if name.lower() == b"content-encoding":
            encoding = value.strip().lower()
            if encoding == b"gzip":
                return zlib.decompress(content, zlib.MAX_WBITS | 16)
            if encoding == b"deflate":
                return zlib.decompress(content)
            if encoding not in (b"", b"identity"):
                raise openai.APIError(f"unsupported Content-Encoding {value!r}", request(),
                                      body=None)
    return content
