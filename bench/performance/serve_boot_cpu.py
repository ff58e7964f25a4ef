"""CPU of one ``amaris serve`` start, to ``/healthz`` 200 and stopped (SIGTERM): the unit of
cost of the end-to-end tests that boot one, in CPU seconds (a loaded machine's wall time
says little).

Each run starts ``amaris serve`` on a fresh data folder (its Prefect home there, as a
first start: the Prefect server child creates its database), as the tests of
``tests/e2e/test_prefect_security.py`` do. Printed per run: the CPU each process of the
tree had used when ``/healthz`` answered (``/proc/<pid>/stat``), then the whole tree's
once stopped (the children ``amaris serve`` waited for included). ``--prefect-only``
times the Prefect server child alone instead, as ``amaris serve`` starts it, to
``/api/health`` 200: on a fresh home, then again on the same (migrated) database.

The code under test is the one on ``PYTHONPATH`` (run it from a worktree at another
commit to compare).

Usage::

    .venv/bin/python -m bench.performance.serve_boot_cpu [--runs 3] [--prefect-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from amaris import readiness
from amaris.app.running import free_port
from tests.support.procs import AMARIS, amaris_env

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def descendants(pid: int) -> list[int]:
    children: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(entry))
    return [p for child in children for p in (child, *descendants(child))]


def wait_ok(url: str, proc: subprocess.Popen[bytes], log: Path) -> float:
    start = time.monotonic()

    def alive() -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}:\n{log.read_text()}")

    if not readiness.wait_ok(url, alive, 900.0, 0.1):
        raise TimeoutError(f"{url} did not answer within 900 s")
    return time.monotonic() - start


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def serve_once(folder: Path) -> None:
    port = free_port()
    config = folder / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "memory": {"path": str(folder / "data"), "embedding_model": "hashing"},
                "server": {"port": port},
                "prefect": {"port": free_port(), "repair_interval_seconds": 3600},
            }
        )
    )
    log = folder / "serve.log"
    before = children_cpu()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*AMARIS, "serve", "--config", str(config)],
            cwd=folder,
            env=amaris_env(unset=("PREFECT_HOME", "PREFECT_API_URL")),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wall = wait_ok(f"http://127.0.0.1:{port}/healthz", proc, log)
    for pid in (proc.pid, *descendants(proc.pid)):
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        print(f"  pid {pid}: {cpu_of(pid):6.2f} s CPU at /healthz  {command[:90]}")
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    print(
        f"  /healthz after {wall:.1f} s wall; the tree, stopped: "
        f"{children_cpu() - before:.2f} s CPU (exit {proc.returncode})"
    )


def prefect_once(home: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    env = amaris_env(unset=("PREFECT_API_URL",))
    env.update(
        {
            "PREFECT_HOME": str(home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_API_AUTH_STRING": "amaris:bench",
            "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(port),
        }
    )
    log = home / "server.log"
    command = [sys.executable, "-m", "uvicorn", "--factory"]
    command += ["amaris.app.prefect_app:create_guarded_app", "--fd", str(sock.fileno())]
    command += ["--log-level", "warning", "--lifespan", "on"]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command, env=env, pass_fds=(sock.fileno(),), stdout=out, stderr=subprocess.STDOUT
        )
    wall = wait_ok(f"http://127.0.0.1:{port}/api/health", proc, log)
    print(f"  /api/health after {wall:.1f} s wall: {cpu_of(proc.pid):.2f} s CPU")
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prefect-only", action="store_true")
    args = parser.parse_args()
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="serve-boot-") as tmp:
            folder = Path(tmp)
            if args.prefect_only:
                print(f"run {run + 1}: the Prefect server child, fresh home")
                prefect_once(folder)
                print(f"run {run + 1}: again, its database migrated")
                prefect_once(folder)
            else:
                print(f"run {run + 1}: amaris serve, fresh data folder")
                serve_once(folder)


if __name__ == "__main__":
    main()
