"""When a batch of judge calls is out (``amaris.llm.outgoing``): each request written to
its endpoint (a real socket on 127.0.0.1), waiting behind a concurrency limit, handed to
the in-process judge, or ended."""

from __future__ import annotations

import asyncio
import contextlib

from amaris.llm.limits import Slot
from amaris.llm.outgoing import Batch, call_out
from amaris.llm.providers import OfflineProvider, OpenAIProvider
from amaris.offline.judge import OfflineJudgeError
from amaris.settings import Settings

MESSAGES = [{"role": "user", "content": "hello"}]
DEADLINE_S = 60.0
"""Generous bound of a wait for a condition (never part of an assertion)."""


class HeldServer:
    """Reads each request whole, then answers only once :attr:`answer` is set."""

    def __init__(self) -> None:
        self.received = 0
        self.answer = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        self.received += 1
        await self.answer.wait()
        body = b'{"choices": [{"message": {"role": "assistant", "content": "1"}}]}'
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()


def tracked(calls: int) -> tuple[Batch, asyncio.Event]:
    out = asyncio.Event()
    return Batch(calls, out.set), out


async def test_a_batch_is_out_once_its_requests_are_sent_before_any_answer() -> None:
    held = HeldServer()
    server = await asyncio.start_server(held.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    provider = OpenAIProvider("k", url)
    options = Settings().agents.for_agent("scorer")
    batch, out = tracked(3)
    calls = [
        asyncio.create_task(batch.run(provider.complete("scorer", MESSAGES, options)))
        for _ in range(3)
    ]
    try:
        await asyncio.wait_for(out.wait(), DEADLINE_S)
        assert not any(call.done() for call in calls)  # out while the answers are held
        held.answer.set()
        answers = await asyncio.wait_for(asyncio.gather(*calls), DEADLINE_S)
        assert [a.content for a in answers] == ["1", "1", "1"]
        assert held.received == 3
    finally:
        held.answer.set()
        await provider.close()
        server.close()
        await server.wait_closed()


async def test_a_call_waiting_for_a_slot_is_out() -> None:
    limit = asyncio.Semaphore(1)
    await limit.acquire()  # another call holds the only slot
    batch, out = tracked(1)

    async def in_turn() -> None:
        async with Slot((limit,), DEADLINE_S):
            pass

    waiting = asyncio.create_task(batch.run(in_turn()))
    await asyncio.wait_for(out.wait(), DEADLINE_S)
    assert not waiting.done()
    limit.release()
    await asyncio.wait_for(waiting, DEADLINE_S)


async def test_a_call_to_the_in_process_judge_is_out_as_it_starts() -> None:
    batch, out = tracked(1)
    seen: list[bool] = []

    async def judged() -> None:
        provider = OfflineProvider()
        # A bare message is no scorer prompt: the judge refuses it, after the start.
        with contextlib.suppress(OfflineJudgeError):
            await provider.complete("scorer", MESSAGES, Settings().agents.for_agent("scorer"))
        seen.append(out.is_set())

    await batch.run(judged())
    assert seen == [True]


async def test_a_call_that_never_reports_is_out_when_it_ends_and_each_counts_once() -> None:
    batch, out = tracked(2)
    reported = asyncio.Event()
    finish = asyncio.Event()

    async def twice() -> None:
        call_out()
        call_out()  # a retry's report: nothing more
        reported.set()
        await finish.wait()

    async def silent() -> None:
        await finish.wait()

    first = asyncio.create_task(batch.run(twice()))
    second = asyncio.create_task(batch.run(silent()))
    await asyncio.wait_for(reported.wait(), DEADLINE_S)
    assert not out.is_set()  # one of two is out
    finish.set()
    await asyncio.wait_for(asyncio.gather(first, second), DEADLINE_S)
    assert out.is_set()


def test_an_empty_batch_is_out_at_once() -> None:
    told: list[str] = []
    Batch(0, lambda: told.append("out"))
    assert told == ["out"]


def test_a_report_outside_a_batch_changes_nothing() -> None:
    call_out()
