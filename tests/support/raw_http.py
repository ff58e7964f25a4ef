"""A raw HTTP/1.1 server on 127.0.0.1 answering with scripted bytes (asyncio streams): what a
real framework cannot produce (keep-alive closes, cut or malformed responses, chunked,
close-delimited and oversized bodies). Used by the tests of the judge's HTTP client
(``amaris.llm.transport``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

ANSWER = {
    "choices": [{"message": {"role": "assistant", "content": '{"ok": true}'}}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3},
}


def ok(body: bytes = json.dumps(ANSWER).encode(), extra: bytes = b"") -> bytes:
    """A 200 response with a Content-Length body."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


Handler = Callable[[bytes, asyncio.StreamWriter], bytes | None]
"""Given one request's bytes, the response bytes (None: close without answering)."""


@dataclass
class RawServer:
    """Answers each request on a connection with ``handler``; records what it saw
    (``connections`` opened, ``ended`` by either side, ``requests``)."""

    handler: Handler
    url: str = ""
    connections: int = 0
    ended: int = 0
    requests: list[bytes] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.handler(request, writer)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the test is over
        finally:
            self.ended += 1
            writer.close()


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[RawServer]:
    state = RawServer(handler)
    server = await asyncio.start_server(state.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    state.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield state
    finally:
        server.close()
        await server.wait_closed()


@asynccontextmanager
async def trickling_server(reply: bytes, piece: int) -> AsyncIterator[tuple[str, list[int]]]:
    """A server that sends ``reply`` ``piece`` bytes every 50 ms after a request's head: its
    URL, and the offsets of the pieces sent (until the client gave up)."""
    sent: list[int] = []

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            for start in range(0, len(reply), piece):
                writer.write(reply[start : start + piece])
                await writer.drain()
                sent.append(start)
                await asyncio.sleep(0.05)
        except ConnectionError:
            pass  # the client gave up
        writer.close()

    server = await asyncio.start_server(trickle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1", sent
    finally:
        server.close()
