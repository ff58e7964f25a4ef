"""The ports are the user's: ``amaris serve`` and ``amaris simulate`` start their servers
(amaris's, its Prefect server's) on the ports they are given, and the commands that talk to
a running service find it there."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from amaris.app.running import free_port
from amaris.readiness import wait_ok
from tests.support.procs import AMARIS, amaris_env, require_slow, run_amaris

pytestmark = pytest.mark.slow


@contextmanager
def answering(args: list[str], cwd: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """``amaris <args>`` with its own Prefect server (not the suite's), once amaris answers
    on ``port``; killed by PID if still running at the end."""
    require_slow(f"amaris {args[0]}")
    env = amaris_env(unset=("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_HOME"))
    with (cwd / f"{args[0]}.log").open("wb") as log:
        proc = subprocess.Popen(
            [*AMARIS, *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT
        )

        def alive() -> None:
            if proc.poll() is not None:
                raise RuntimeError(f"amaris {args[0]} exited with {proc.returncode}")

        try:
            assert wait_ok(f"http://127.0.0.1:{port}/healthz", alive, 180.0, 0.1)
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


def config(folder: Path) -> str:
    path = folder / "config.yaml"
    data = {"memory": {"path": str(folder / "data"), "embedding_model": "hashing"}}
    path.write_text(yaml.safe_dump({**data, "prefect": {"repair_interval_seconds": None}}))
    return str(path)


@dataclass(frozen=True)
class Served:
    """An ``amaris serve`` on ports it was given: amaris's, its Prefect server's; the folder
    of its config (whose ``server.port`` is the default, not the one served on)."""

    folder: Path
    config: str
    port: int
    prefect: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One ``amaris serve`` for the tests that only read it (it boots slowly)."""
    folder = tmp_path_factory.mktemp("serve")
    port, prefect = free_port(), free_port()
    path = config(folder)
    args = ["serve", "--config", path, "--port", str(port), "--prefect-port", str(prefect)]
    with answering(args, folder, port):
        yield Served(folder, path, port, prefect)


def test_serve_runs_its_prefect_server_on_the_port_it_is_given(served: Served) -> None:
    health = httpx.get(f"http://127.0.0.1:{served.prefect}/api/health", timeout=10)
    assert health.status_code == 200


def test_simulate_serves_on_the_ports_it_is_given(tmp_path: Path) -> None:
    port, prefect = free_port(), free_port()
    args = ["simulate", "--config", config(tmp_path), "--steps", "2", "--rollouts-per-step", "2"]
    ports = ["--port", str(port), "--prefect-port", str(prefect), "--out", "report"]
    with answering([*args, *ports], tmp_path, port) as proc:
        assert httpx.get(f"http://127.0.0.1:{prefect}/api/health", timeout=10).status_code == 200
        assert proc.wait(timeout=300) == 0, (tmp_path / "simulate.log").read_text()
    said = (tmp_path / "simulate.log").read_text()
    assert f"server http://127.0.0.1:{port}" in said
    assert "simulate simulate" not in said
    assert (tmp_path / "report" / "metrics.json").is_file()


def test_the_commands_find_a_service_started_on_another_port(served: Served) -> None:
    dead = free_port()
    path, cwd = served.config, served.folder  # its server.port is not the one served on
    shown = run_amaris(["rubrics", "show", "--config", path], cwd)
    assert shown.returncode == 0, shown.stderr
    assert "The response gives the correct final answer." in shown.stdout
    history = run_amaris(["rubrics", "history", "--config", path], cwd)
    assert history.returncode == 0, history.stderr
    assert "config" in history.stdout
    inspected = run_amaris(["memory", "inspect", "--config", path, "--json"], cwd)
    assert inspected.returncode == 0, inspected.stderr
    assert isinstance(json.loads(inspected.stdout), dict)
    # an address given that answers nothing is named in the error
    missed = run_amaris(
        ["rubrics", "show", "--config", path, "--url", f"http://127.0.0.1:{dead}"], cwd
    )
    assert missed.returncode == 1
    assert f"http://127.0.0.1:{dead}" in missed.stderr and "--url" in missed.stderr
