"""The gateway's limits entered as one context manager (:meth:`Limits.slot`): the agent's
limit, then the total, each released on the way out, on a cancelled wait and on the
backstop's timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from amaris.llm.limits import TIMEOUT_GRACE_SECONDS, Limits
from amaris.llm.providers import OfflineProvider
from tests.support.settings import make_settings


def limits(tmp_path: Path) -> Limits:
    settings = make_settings(tmp_path, **{"concurrency.scorer": 1, "concurrency.total": 1})
    return Limits(settings, {"scorer": OfflineProvider(), "analyzer": OfflineProvider()})


async def test_a_slot_holds_its_limits_and_releases_them(tmp_path: Path) -> None:
    lim = limits(tmp_path)
    entered = asyncio.Event()
    leave = asyncio.Event()

    async def hold() -> None:
        async with lim.slot("scorer", "offline", 60.0):
            entered.set()
            await leave.wait()

    holder = asyncio.create_task(hold())
    await entered.wait()
    # The total is held: another agent's call waits for it.
    other = asyncio.create_task(lim.slot("analyzer", "offline", 60.0).__aenter__())
    await asyncio.sleep(0)
    assert not other.done()
    leave.set()
    await holder
    await other  # the total was released: the other call got it
    assert other.result() is None


async def test_a_cancelled_wait_releases_the_limits_already_taken(tmp_path: Path) -> None:
    lim = limits(tmp_path)
    leave = asyncio.Event()
    entered = asyncio.Event()

    async def analyzer() -> None:
        async with lim.slot("analyzer", "offline", 60.0):
            entered.set()
            await leave.wait()

    holder = asyncio.create_task(analyzer())
    await entered.wait()

    async def scorer() -> None:
        # Takes the scorer's own limit, then waits for the total the analyzer holds.
        async with lim.slot("scorer", "offline", 60.0):
            raise AssertionError("entered while the total was held")

    waiting = asyncio.create_task(scorer())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    leave.set()
    await holder
    # The scorer's limit (1 slot) was given back by the cancelled wait: a new call enters.
    async with asyncio.timeout(10):
        async with lim.slot("scorer", "offline", 60.0):
            pass


async def test_the_backstop_times_out_the_body_and_releases_every_limit(tmp_path: Path) -> None:
    lim = limits(tmp_path)
    timeout = -TIMEOUT_GRACE_SECONDS  # the backstop is already due
    with pytest.raises(TimeoutError):
        async with lim.slot("scorer", "offline", timeout):
            await asyncio.Event().wait()
    async with asyncio.timeout(10):
        async with lim.slot("scorer", "offline", 60.0):
            pass
        async with lim.slot("analyzer", "offline", 60.0):
            pass
