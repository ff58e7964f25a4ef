"""Start and stop real amaris processes on 127.0.0.1 for end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from amaris.readiness import wait_ok

AMARIS = [sys.executable, "-m", "amaris.cli.main"]

NOBODY = ["/usr/bin/setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
"""Prefix of a command run as another local user (uid/gid 65534): CI runs as root, and the
attacks on the data folder come from another user of the machine."""

current_test_is_slow = False
"""Whether the running test is marked ``slow`` (set for each test by tests/conftest.py)."""


def require_slow(what: str) -> None:
    """Refuse to start ``what`` (a real process) from a test not marked ``slow``: the quick
    loop, ``pytest -m "not slow"``, must stay quick.

    Raises:
        RuntimeError: the running test is not marked ``slow``.
    """
    if not current_test_is_slow:
        raise RuntimeError(f"{what} starts a real process: mark the test @pytest.mark.slow")


def amaris_env(unset: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment an ``amaris`` child process gets: this one's without the keys a
    test must not leak into it (and ``unset``), output unbuffered."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"OPENAI_API_KEY", "AMARIS_API_KEY", "OPENAI_BASE_URL", *unset}
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    """Poll ``url`` until it answers 200, failing early if ``proc`` exits.

    The default is generous: a service boots far slower on a machine whose cores also run
    the other test worker's model or servers."""

    def alive() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")

    if not wait_ok(url, alive, timeout, 0.1):
        raise TimeoutError(f"{url} did not answer within {timeout} s")


@contextmanager
def amaris_process(
    args: list[str], cwd: Path, ready_url: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``amaris <args>`` until the block ends; stop it by PID (SIGTERM, then SIGKILL)."""
    require_slow(f"amaris {args[0]}")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*AMARIS, *args], cwd=cwd, env=amaris_env(), stdout=out, stderr=subprocess.STDOUT
        )
        try:
            wait_http(ready_url, proc)
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


def run_amaris(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a short ``amaris`` command and capture its output."""
    require_slow(f"amaris {args[0]}")
    return subprocess.run(
        [*AMARIS, *args], cwd=cwd, env=amaris_env(), capture_output=True, text=True, timeout=timeout
    )
