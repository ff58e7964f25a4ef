"""bench/probes/artifact_urls.py at its smoke size: a step's artifacts with planted URLs, as
amaris writes them and verbatim, opened in Prefect's UI by headless Chromium: amaris's render
nothing live, the verbatim ones do (so the probe sees what it looks for)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from bench._common import ROOT

pytestmark = [
    pytest.mark.slow,  # a Prefect server and Chromium
    pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium"),
]


def test_the_smoke_run_finds_nothing_live_in_amaris_artifacts() -> None:
    # Its own process: the script points this process's Prefect client at its server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.probes.artifact_urls", "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        mode: tuple(int(v) for v in values)
        for mode, *values in re.findall(
            r"^\| (escaped|raw) \| V1 \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|$",
            done.stdout,
            re.M,
        )
    }
    assert set(rows) == {"escaped", "raw"}
    pages, requests, images, links, scripts, shown = rows["escaped"]
    assert (pages, requests, images, links, scripts) == (1, 0, 0, 0, 0)
    assert shown > 0  # the planted strings are on the page, as text
    assert sum(rows["raw"][1:4]) > 0  # verbatim, the same strings render live
    assert (
        "**PASS** escaped: nothing planted reaches the listener or renders live: 0 " in done.stdout
    )
