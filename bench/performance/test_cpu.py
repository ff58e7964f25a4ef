"""CPU of each test, its processes included: a pytest plugin.

A loaded two-core machine stretches wall time; CPU seconds say what a test costs. For
each test this adds up the CPU of the pytest process, of the children it has reaped and
of every live process below it (``/proc``: the servers a test starts, a session's Prefect
test server), before and after the test, and writes one JSON line per test: its id, wall
seconds and CPU seconds.

Usage (one process, ``-n 0``, so that the tree is the test's)::

    PYTHONPATH=. CPU_OUT=/tmp/cpu.jsonl .venv/bin/python -m pytest -p bench.performance.test_cpu \\
        -n 0 -p no:cacheprovider tests/e2e
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator
from typing import Any

import pytest

from amaris.app.running import proc_stat

TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu() -> float:
    """CPU seconds of this process, its reaped children and its live descendants."""
    me = os.getpid()
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        fields = proc_stat(int(entry)) if entry.isdigit() else None
        if fields is None:
            continue
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / TICK
    total = 0.0
    for pid, seconds in used.items():
        above = parent.get(pid, 0)
        while above not in (0, 1, me):
            above = parent.get(above, 0)
        if above == me:
            total += seconds
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, None, None]:
    cpu, wall = tree_cpu(), time.monotonic()
    yield
    row = {"id": item.nodeid, "wall": time.monotonic() - wall, "cpu": tree_cpu() - cpu}
    with open(os.environ.get("CPU_OUT", "test-cpu.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")
