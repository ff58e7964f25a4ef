"""An ``amaris serve`` the simulator owns: a subprocess on a free port with its own data
folder, stopped by its PID (SIGTERM, then SIGKILL) with whatever it left in its session."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import yaml

from amaris.app.prefect_server import PrefectServer
from amaris.app.running import free_port, stop_session
from amaris.readiness import wait_ok
from amaris.settings import RubricItem, load_settings, set_dotted
from amaris.settings.loader import RawConfig

ConfigValue = str | int | float | bool | None | tuple[RubricItem, ...]
"""A setting's value given by its dotted key (``server.port``: 8002; ``anchor_rubrics``:
criteria)."""
STARTUP_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


class ServerError(RuntimeError):
    """The server could not start; the message carries the end of its log."""


def write_config(base: Path | None, folder: Path, overrides: Mapping[str, ConfigValue]) -> Path:
    """``base`` (or the built-ins) with dotted-key ``overrides``, validated, written to
    ``<folder>/config.yaml``.

    Raises:
        amaris.settings.ConfigError: the result is invalid (the message names the key).
    """
    raw = RawConfig()  # the YAML file as read, validated by load_settings below
    if base is not None:
        raw = RawConfig(yaml.safe_load(Path(base).read_text(encoding="utf-8")) or {})
    for dotted, value in overrides.items():
        if isinstance(value, tuple):
            set_dotted(raw, dotted, [item.model_dump(mode="json") for item in value])
        else:
            set_dotted(raw, dotted, value)
    path = folder / "config.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw.data, sort_keys=False), encoding="utf-8")
    load_settings(path)  # fail here, naming the key, rather than in the child
    return path


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextmanager
def shared_prefect(folder: Path, port: int | None = None) -> Iterator[dict[str, str] | None]:
    """One Prefect server for several ``amaris serve`` (each would boot its own, slowly),
    on ``port`` (None: a free one): yields the environment that points them at it (its API
    URL and auth string), or None when ``PREFECT_API_URL`` names one already."""
    if os.environ.get("PREFECT_API_URL"):
        yield None
        return
    server = PrefectServer(folder / "prefect", port)
    server.start()
    try:
        server.wait_ready()
        yield server.client_env()
    finally:
        server.stop()


@contextmanager
def managed_server(
    base_config: Path | None,
    folder: Path,
    overrides: Mapping[str, ConfigValue] | None = None,
    prefect_env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Run ``amaris serve`` with its data folder in ``folder``; yield its URL.

    The configuration is ``base_config`` with the data folder, a free port, async mode,
    manual step completion, no scheduled repair, a Prefect server on a free port and
    ``overrides`` (``server.port`` and ``prefect.port`` among them, to choose the ports).
    The server uses the Prefect API ``prefect_env`` names (as :func:`shared_prefect`
    yields it; else ``PREFECT_API_URL``) when set, and starts its own otherwise;
    Prefect's home is always under its data folder.
    """
    chosen = (overrides or {}).get("server.port")
    port = chosen if isinstance(chosen, int) else free_port()
    settings: dict[str, ConfigValue] = {
        "memory.path": str(folder / "data"),
        "memory.rubrics_path": None,
        # Embedded Qdrant in the fresh folder, even when the base config names a server:
        # a simulation or a replay mode must start from an empty memory.
        "memory.qdrant_url": None,
        "server.host": "127.0.0.1",
        "server.port": port,
        "pipeline.rollouts_per_step": None,
        # Sync mode would hold every /score until its step completes: the loop completes
        # a step only after scoring it.
        "pipeline.mode": "async",
        "prefect.port": None,
        "prefect.repair_interval_seconds": None,
        "logging.level": "WARNING",
        "logging.path": None,
        **(overrides or {}),
    }
    config = write_config(base_config, folder, settings)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_HOME"}
    env.update(prefect_env or {})
    env["PYTHONUNBUFFERED"] = "1"
    log = folder / "serve.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "amaris.cli.main", "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=folder,
            start_new_session=True,
        )
    try:
        _wait_ready(proc, f"{url}/healthz", log)
        yield url
    finally:
        # Its Prefect server and repair worker share its session: stop leftovers by PID.
        stop_session(proc, STOP_TIMEOUT_S)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    def alive() -> None:
        if proc.poll() is not None:
            raise ServerError(f"amaris serve exited with code {proc.returncode}:\n{_tail(log)}")

    if not wait_ok(url, alive, STARTUP_TIMEOUT_S, 0.2):
        raise ServerError(f"amaris serve not ready after {STARTUP_TIMEOUT_S:.0f} s:\n{_tail(log)}")
