"""Fixtures of the benchmarks' smoke tests: the suite's Prefect server for the servers a
benchmark starts, and the SIGTERM handler a benchmark's ``main`` installs, put back."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from bench._common import SMOKE_PREFECT_API


@pytest.fixture(autouse=True)
def _sigterm_restored() -> Iterator[None]:
    """A benchmark's ``main`` turns SIGTERM into KeyboardInterrupt; the worker's own comes
    back after the test."""
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


@pytest.fixture
def shared_prefect(prefect_harness: None, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session's Prefect test server, for the amaris processes a benchmark starts
    (through :data:`SMOKE_PREFECT_API`, or ``PREFECT_API_URL`` for ``amaris simulate``):
    none boots its own. Its API URL."""
    from prefect.settings import PREFECT_API_URL

    url = str(PREFECT_API_URL.value())
    monkeypatch.setenv(SMOKE_PREFECT_API, url)
    monkeypatch.setenv("PREFECT_API_URL", url)
    return url
