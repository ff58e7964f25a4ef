"""bench/_common.py: where a smoke run's section goes, which Prefect the processes a
benchmark starts use, and whose database a step's runs are read from."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench._common import (
    DOC,
    SMOKE_PREFECT_API,
    SMOKE_PREFECT_DB,
    SMOKE_SETTINGS,
    child_env,
    prefect_database,
    report_path,
    shared_prefect_database,
)


def test_a_smoke_run_writes_its_section_only_where_told_and_never_to_the_page(
    tmp_path: Path,
) -> None:
    assert report_path(None, smoke=False) == DOC
    assert report_path(tmp_path / "x.md", smoke=False) == tmp_path / "x.md"
    assert report_path(None, smoke=True) is None  # printed only
    assert report_path(tmp_path / "x.md", smoke=True) == tmp_path / "x.md"
    with pytest.raises(SystemExit, match=r"docs/benchmarks\.md"):
        report_path(DOC, smoke=True)


def test_children_use_the_shared_prefect_only_when_told_and_not_measuring_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://developer:4200/api")
    monkeypatch.delenv(SMOKE_PREFECT_API, raising=False)
    assert "PREFECT_API_URL" not in child_env()  # a developer's Prefect changes nothing
    assert SMOKE_SETTINGS.keys().isdisjoint(child_env())  # by default, as configured
    monkeypatch.setenv(SMOKE_PREFECT_API, "http://127.0.0.1:1/api")
    monkeypatch.setenv(SMOKE_PREFECT_DB, "/tmp/shared.db")
    shared = child_env()
    assert shared["PREFECT_API_URL"] == "http://127.0.0.1:1/api"
    assert SMOKE_PREFECT_API not in shared and SMOKE_PREFECT_DB not in shared
    assert SMOKE_SETTINGS.items() <= shared.items()  # no repair worker, no MiniLM
    own = child_env(own_prefect=True)
    assert "PREFECT_API_URL" not in own and SMOKE_SETTINGS.keys().isdisjoint(own)


def test_a_steps_runs_are_read_from_amaris_own_prefect_else_the_shared_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SMOKE_PREFECT_API, raising=False)
    monkeypatch.setenv(SMOKE_PREFECT_DB, str(tmp_path / "shared.db"))
    assert shared_prefect_database() is None  # its children do not use the shared server
    assert prefect_database(tmp_path / "data") is None
    monkeypatch.setenv(SMOKE_PREFECT_API, "http://127.0.0.1:1/api")
    assert shared_prefect_database() == tmp_path / "shared.db"
    assert prefect_database(tmp_path / "data") == tmp_path / "shared.db"
    own = tmp_path / "data" / "prefect" / "prefect.db"
    own.parent.mkdir(parents=True)
    own.touch()
    assert prefect_database(tmp_path / "data") == own
