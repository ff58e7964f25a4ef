"""Requests in flight are bounded by the process's open-file limit, whatever the settings."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

import pytest

from amaris.llm import limits
from amaris.llm.limits import Limits, in_flight_ceiling
from tests.support.settings import make_settings


def test_the_ceiling_is_an_eighth_of_the_open_file_limit() -> None:
    assert in_flight_ceiling(256) == 32
    assert in_flight_ceiling(64) == 16  # never below 16
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert in_flight_ceiling() == (max(16, soft // 8) if soft != resource.RLIM_INFINITY else 65536)


async def test_a_gateway_without_limits_keeps_its_requests_under_the_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "in_flight_ceiling", lambda: in_flight_ceiling(256))
    gateway_limits = Limits(make_settings(tmp_path), {})
    running = most = 0

    async def call() -> None:
        nonlocal running, most
        async with gateway_limits.slot("analyzer", "http://judge/v1", 10.0):
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.01)
            running -= 1

    await asyncio.gather(*(call() for _ in range(200)))
    assert most == 32
