"""Fixtures of the benchmarks' smoke tests: the suite's Prefect server for the servers a
benchmark starts, and the SIGTERM handler a benchmark's ``main`` installs, put back."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from bench._common import SMOKE_PREFECT_API, SMOKE_PREFECT_DB


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
    none boots its own. Its SQLite database goes in :data:`SMOKE_PREFECT_DB`, for the
    benchmarks that read a step's runs there. Its API URL."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_DATABASE_CONNECTION_URL

    url = str(PREFECT_API_URL.value())
    database = str(PREFECT_SERVER_DATABASE_CONNECTION_URL.value())
    scheme, _, path = database.partition(":///")
    assert scheme.startswith("sqlite") and path, database
    monkeypatch.setenv(SMOKE_PREFECT_API, url)
    monkeypatch.setenv(SMOKE_PREFECT_DB, path)
    monkeypatch.setenv("PREFECT_API_URL", url)
    return url
