"""The processes of amaris and the ones it starts: where a running one is, the port it is
given, the processes of its session, and stopping them by PID.

A running amaris keeps a private JSON record of its pid and address, written when it starts
and removed when it stops, so that the commands that talk to it find it on the port it was
given (``amaris serve --port``), not only on the configured one. A child started in its own
session (``start_new_session``) is stopped with whatever it left running there (Linux
``/proc``): the simulator's servers, the benchmarks' and the tests' children.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from amaris.private import open_private

SERVICE_RECORD = "service.json"
"""The record ``amaris serve`` keeps in its data folder: its pid and URL."""


def write_record(path: Path, **fields: str | int) -> None:
    """Record ``fields`` (a ``pid`` among them) at ``path``, mode 0600, replacing a record
    left there."""
    path.unlink(missing_ok=True)
    with os.fdopen(open_private(path, append=False), "w") as out:
        out.write(json.dumps(fields))


def live_record(path: Path) -> dict[str, str] | None:
    """The record at ``path`` while its process runs; None when there is none, it cannot
    be read, or its process is gone (a killed amaris leaves its record behind)."""
    try:
        data = json.loads(path.read_text())
        os.kill(int(data["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None


def drop_record(path: Path) -> None:
    """Remove the record at ``path`` if this process wrote it."""
    record = live_record(path)
    if record is not None and record.get("pid") == str(os.getpid()):
        path.unlink(missing_ok=True)


def recorded_service(data: Path) -> str | None:
    """The URL of the ``amaris serve`` running on the data folder ``data``, if any."""
    record = live_record(data / SERVICE_RECORD)
    return record.get("url") if record else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def proc_stat(pid: int, tid: int | None = None) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` (of thread ``tid``: ``/proc/<pid>/task/<tid>/stat``)
    after the command name (state first), or None."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        stat = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def session_pids(sid: int) -> list[int]:
    """Live processes of session ``sid``: a child started in its own session and what it
    started (a server amaris spawns among them). Empty off Linux."""
    pids: list[int] = []
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return pids
    for entry in entries:
        if not entry.name.isdigit():
            continue
        fields = proc_stat(int(entry.name))
        if fields is not None and fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def send_signal(pid: int, sig: signal.Signals) -> None:
    """``kill(pid, sig)``, ignoring a process already gone (or not ours)."""
    with suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def stop_session(
    proc: subprocess.Popen[bytes],
    timeout: float,
    report: Callable[[str], object] | None = None,
) -> None:
    """Stop ``proc``, a child started in its own session, by its PID (SIGTERM, then SIGKILL
    after ``timeout``), then what it left running in its session, by their PIDs the same way.

    ``report`` gets a line when ``proc`` ignores SIGTERM and when it left processes behind.
    """
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            if report is not None:
                report("ignored SIGTERM; killing it")
            proc.kill()
            proc.wait(timeout=timeout)
    leftovers = session_pids(proc.pid)
    if not leftovers:
        return
    if report is not None:
        report(
            f"left {len(leftovers)} process(es) running "
            f"(pids {', '.join(map(str, leftovers))}); stopping them"
        )
    for pid in leftovers:
        send_signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and session_pids(proc.pid):
        time.sleep(0.1)
    for pid in session_pids(proc.pid):
        send_signal(pid, signal.SIGKILL)
