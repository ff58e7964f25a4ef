"""Requests in flight are bounded by the process's open-file limit, whatever the settings."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from amaris.llm.limits import Limits, in_flight_ceiling
from tests.support.settings import make_settings


@pytest.fixture
def low_file_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        yield 256
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_ceiling_is_an_eighth_of_the_open_file_limit(low_file_limit: int) -> None:
    assert in_flight_ceiling() == low_file_limit // 8


async def test_a_gateway_without_limits_keeps_its_requests_under_the_ceiling(
    low_file_limit: int, tmp_path: Path
) -> None:
    limits = Limits(make_settings(tmp_path), {})
    running = most = 0

    async def call() -> None:
        nonlocal running, most
        async with limits.slot("analyzer", "http://judge/v1", 10.0):
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(call() for _ in range(200)))
    assert most == low_file_limit // 8
