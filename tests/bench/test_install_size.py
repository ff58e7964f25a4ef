"""bench/performance/install_size.py at its smoke size: the client install of the working tree
into a fresh venv, without the service's dependencies, its client modules and CLI probed."""

from __future__ import annotations

import json

import pytest

from bench.performance import install_size as bench

pytestmark = pytest.mark.slow  # a venv and pip install


def test_the_smoke_run_installs_the_client_without_the_service(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--smoke"]) == 0
    lines = capsys.readouterr().out.splitlines()
    result = json.loads(lines[0])
    assert result["kind"] == "client"
    assert result["has"] == dict.fromkeys(bench.SERVER_PACKAGES, False)
    assert "httpx" in result["client_imports"] and "amaris" not in result["client_imports"]
    assert result["distributions"] > 1 and result["added_mb"] > 0
    assert result["cli_first_line"].startswith("usage: amaris")
    modules = len(result["client_imports"])
    row = next(line for line in lines if line.startswith("| client |"))
    assert row.endswith(
        f"| {result['distributions']} | no / no / no / no | {modules} | {result['cli_exit']} |"
    )
