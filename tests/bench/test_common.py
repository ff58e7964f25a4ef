"""bench/_common.py: where a smoke run's section goes, and which Prefect the processes a
benchmark starts use."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench._common import DOC, SMOKE_PREFECT_API, child_env, report_path


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
    monkeypatch.setenv(SMOKE_PREFECT_API, "http://127.0.0.1:1/api")
    assert child_env()["PREFECT_API_URL"] == "http://127.0.0.1:1/api"
    assert SMOKE_PREFECT_API not in child_env()
    assert "PREFECT_API_URL" not in child_env(own_prefect=True)
