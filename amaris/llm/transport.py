"""The judge's HTTP client: chat-completion requests over ``aiohttp``, the SDK's errors.

On the scoring hot path the ``openai`` SDK's request machinery is the largest cost amaris
would add to a judge call, several times that of ``aiohttp``: a trainer's batch of rewards
ends later with it (``bench/performance/judge_transport.py``; docs/benchmarks.md, "Judge
transport"). So an
``openai.AsyncOpenAI`` client holds the endpoint's configuration (base URL, including
``OPENAI_BASE_URL``; its auth, user agent and platform headers, read through its public
``base_url``, ``default_headers`` and ``auth_headers``) and :class:`JsonEndpoint` posts
the JSON body with those headers over an ``aiohttp`` keep-alive pool.

Errors are the SDK's public exception types, built here from the response: a non-2xx
answer raises ``openai.APIStatusError`` or its subclass for the status
(``RateLimitError``, ``InternalServerError``...) with the response's headers (the
gateway reads ``retry-after``), a timeout ``openai.APITimeoutError``, a refused, lost or
malformed connection ``openai.APIConnectionError``. No retries here: the gateway's retry
layer owns every attempt.

A response body is untrusted: it is read in chunks and abandoned past ``max_bytes``
(:class:`ResponseTooLargeError`), never held whole first, and an attempt has one deadline
for the connect, the wait and the body together, so a server dripping bytes cannot hold
it open (the timeout also bounds each wait for bytes).

Proxies from the environment (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) apply, read
once per endpoint (aiohttp's ``trust_env`` would read them, and ``.netrc``, in a thread on
every request); certificates are verified against the same bundle as the SDK's (``SSL_CERT_FILE``,
else certifi).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.request
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, Required, TypedDict

import aiohttp
import httpx2
import openai
import yarl

from amaris.llm.outgoing import call_out
from amaris.llm.output_mode import RequestFormat
from amaris.settings import ProviderJSON


class ChatBody(TypedDict, total=False):
    """The JSON body of a chat-completion request, as amaris writes it
    (:func:`amaris.llm.providers.chat_body`); the agent's ``extra_body`` is added to it
    when it is sent (:meth:`JsonEndpoint.post`)."""

    model: Required[str]
    messages: Required[list[dict[str, str]]]
    temperature: float
    max_tokens: int
    response_format: RequestFormat
    service_tier: str
    logprobs: bool
    top_logprobs: int


READ_CHUNK_BYTES = 65_536
"""Bytes asked of the socket buffer at a time while a body is read."""
ERROR_BODY_BYTES = 65_536
"""Bytes of a non-2xx body kept for its error (the rest is not read)."""

KEEPALIVE_EXPIRY_S = 4.0
"""Idle connections older than this are not reused: uvicorn (vLLM) closes its idle ones
after 5 s, and a request sent as the server closes would fail."""

_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


class ResponseTooLargeError(ValueError):
    """A response body (declared or read so far) is longer than the endpoint's limit."""

    def __init__(self, size: int, limit: int, declared: bool) -> None:
        if declared:
            message = f"the response declares {size} bytes; the limit is {limit}"
        else:
            message = f"the response ran past the limit of {limit} bytes (abandoned unread)"
        super().__init__(message)
        self.limit = limit


async def read_bounded(response: aiohttp.ClientResponse, limit: int, *, cut: bool = False) -> bytes:
    """The body of ``response``, read chunk by chunk; at most ``limit`` bytes are held.

    ``cut``: past ``limit``, the first ``limit`` bytes (the rest unread) instead of an error.

    Raises:
        ResponseTooLargeError: ``Content-Length`` or the bytes read pass ``limit``.
    """
    declared = response.content_length
    if not cut and declared is not None and declared > limit:
        raise ResponseTooLargeError(declared, limit, declared=True)
    body = bytearray()
    while chunk := await response.content.read(min(READ_CHUNK_BYTES, limit + 1 - len(body))):
        body += chunk
        if len(body) > limit:
            if cut:
                return bytes(body[:limit])
            raise ResponseTooLargeError(len(body), limit, declared=False)
    return bytes(body)


def environment_proxy(url: str) -> str | None:
    """The proxy the environment sets for ``url`` (``NO_PROXY`` honoured), if any."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    proxies = urllib.request.getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy


def status_error(
    url: str, status: int, headers: list[tuple[bytes, bytes]], content: bytes
) -> openai.APIStatusError:
    """The ``openai`` exception the SDK raises for a non-2xx answer, built from it.

    The class is chosen by status as the SDK does (400 ``BadRequestError`` ... 429
    ``RateLimitError``, 5xx ``InternalServerError``, else ``APIStatusError``); ``body`` is
    the JSON body's ``error`` object (or the body), the message names the status and body.
    """
    request = httpx2.Request("POST", url)
    response = httpx2.Response(status, headers=headers, content=content, request=request)
    try:
        body: Any = json.loads(content) if content else None
    except ValueError:
        body = content.decode("utf-8", errors="replace")
    data = body.get("error", body) if isinstance(body, dict) else body
    error = _STATUS_ERRORS.get(status) or (
        openai.InternalServerError if status >= 500 else openai.APIStatusError
    )
    return error(f"Error code: {status} - {body}", response=response, body=data)


def _out_when_sent() -> aiohttp.TraceConfig:
    """Tells a request's call :func:`~amaris.llm.outgoing.call_out` as its body is written."""

    async def body_sent(
        session: aiohttp.ClientSession,
        context: SimpleNamespace,
        params: aiohttp.TraceRequestChunkSentParams,
    ) -> None:
        call_out()

    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(body_sent)
    return trace


class JsonEndpoint:
    """POSTs JSON under one ``openai.AsyncOpenAI`` client's base URL, with its headers.

    One ``aiohttp`` session per event loop (the scorer runs on the API's loop, the step
    agents on the pipeline's), created on its loop's first request. The pool has no cap
    of its own: the gateway's concurrency limits bound the requests in flight.
    """

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        # Credentials in the URL (``http://user:pass@host/v1``, as some proxies take) are
        # not sent: aiohttp refuses them beside the bearer header, which is the endpoint's auth.
        self._base_url = yarl.URL(str(client.base_url)).with_user(None)
        self._base = str(self._base_url.with_query(None)).rstrip("/")
        headers = {k: v for k, v in client.default_headers.items() if isinstance(v, str)}
        headers.update(client.auth_headers)
        headers["Accept-Encoding"] = "identity"
        headers["Content-Type"] = "application/json"
        self._headers = headers
        self._proxy = environment_proxy(self._base)
        self._timeouts: dict[float | None, aiohttp.ClientTimeout] = {}
        self._urls: dict[str, str] = {}
        """The URL of each path posted to (a few: built once each)."""
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._ssl: ssl.SSLContext | None = None

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            if self._ssl is None:
                self._ssl = httpx2.create_ssl_context()
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0, keepalive_timeout=KEEPALIVE_EXPIRY_S, ssl=self._ssl
                ),
                headers=self._headers,
                proxy=self._proxy,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent",),
                trace_configs=[_out_when_sent()],
            )
            self._sessions[loop] = session
        return session

    async def post(
        self,
        path: str,
        body: ChatBody,
        timeout: float | None,
        max_bytes: int,
        extra: ProviderJSON | None = None,
        on_headers: Callable[[Mapping[str, str]], None] | None = None,
    ) -> bytes:
        """POST ``body`` as JSON to ``<base_url>/<path>``; the response body of a 2xx.

        ``extra``'s fields are added to ``body``'s (a field of both takes ``extra``'s
        value, in ``body``'s place). ``on_headers`` is given a 2xx response's headers
        (case-insensitive; an error's are on the exception it raises).

        ``timeout`` bounds the whole attempt (connect, wait, body), and each wait for
        response bytes; at most ``max_bytes`` of the body are read (an error body's first
        :data:`ERROR_BODY_BYTES`).

        Raises:
            ResponseTooLargeError: a 2xx body longer than ``max_bytes``: the connection is
                dropped, the rest unread.
        """
        url = self._urls.get(path)
        if url is None:
            # A query in the base URL (``?tenant=...``, ``?api-version=...``) stays a query.
            base = self._base_url
            url = str(base.with_path(f"{base.path.rstrip('/')}/{path}").with_query(base.query))
            self._urls[path] = url
        sent = {**body, **extra.root} if extra else body
        payload = json.dumps(sent, ensure_ascii=False).encode("utf-8")
        limits = self._timeouts.get(timeout)
        if limits is None:
            # ``total`` alone: a connect or a wait for bytes starts after the attempt does,
            # so a ``sock_connect`` or ``sock_read`` of the same seconds would end after it
            # (and each chunk received would re-arm the read timer for nothing).
            limits = aiohttp.ClientTimeout(total=timeout)
            self._timeouts[timeout] = limits
        try:
            async with self._session().post(url, data=payload, timeout=limits) as response:
                status, headers = response.status, list(response.raw_headers)
                if 200 <= status < 300:
                    if on_headers is not None:
                        on_headers(response.headers)
                    content = await read_bounded(response, max_bytes)
                else:
                    content = await read_bounded(response, ERROR_BODY_BYTES, cut=True)
        except TimeoutError as exc:  # aiohttp's timeouts subclass it
            raise openai.APITimeoutError(request=httpx2.Request("POST", url)) from exc
        except aiohttp.ClientError as exc:
            raise openai.APIConnectionError(
                message=f"Connection error: {type(exc).__name__}: {exc}",
                request=httpx2.Request("POST", url),
            ) from exc
        if not 200 <= status < 300:
            raise status_error(url, status, headers, content)
        return content

    async def close(self) -> None:
        """Close the session of the running loop, and those of loops that have stopped."""
        current = asyncio.get_running_loop()
        sessions, self._sessions = self._sessions, {}
        for loop, session in sessions.items():
            if loop is current:
                await session.close()
            elif loop.is_running():
                # Its connections belong to another running loop: close them there.
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(session.close(), loop))
            # A stopped loop's sockets went with it (closed with the loop or collected).
