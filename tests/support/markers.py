"""The tiers' markers (a real-model test is slow too) and the order files go to the two
xdist workers: a hook of tests/conftest.py."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test of the real-model tier (marker ``real_model``, or the ``real_llm`` fixture) is
    slow too: ``pytest -m "not slow"`` leaves it out."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if item.get_closest_marker("real_model") or "real_llm" in fixtures:
            for marker in ("real_model", "slow"):
                if item.get_closest_marker(marker) is None:
                    item.add_marker(marker)
    _longest_files_first(items)


def _longest_files_first(items: list[pytest.Item]) -> None:
    """Order the files so the two xdist workers (``--dist loadfile``, files in this order:
    ``--no-loadscope-reorder`` in pyproject.toml) finish together: the real-model tier
    first (it is most of one worker's run; started last, it alone would outlast the other
    worker), then the files with real processes (``slow``), then those running
    Prefect flows (``prefect_harness``), then the rest; within each, the files with more
    tests first (xdist's own order). A file's tests keep their order."""
    rank: dict[str, tuple[int, int]] = {}
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        tier = (
            0
            if item.get_closest_marker("real_model")
            else 1
            if item.get_closest_marker("slow")
            else 2
            if "prefect_harness" in fixtures
            else 3
        )
        path = item.nodeid.split("::")[0]
        best, count = rank.get(path, (tier, 0))
        rank[path] = (min(best, tier), count - 1)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])
