"""Stopping a child started in its own session takes what it left there with it
(amaris/app/running.py: the simulator's servers and the benchmarks' children use it)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from amaris.app.running import free_port, session_pids, stop_session

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_a_free_port_can_be_bound() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))


def test_the_child_and_what_it_left_in_its_session_are_stopped() -> None:
    # The shell runs a background sleep, then waits: SIGTERM ends the shell, not the sleep.
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 60 & wait"], stdin=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 10
    while len(session_pids(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(session_pids(proc.pid)) == 2
    reported: list[str] = []
    stop_session(proc, 10.0, reported.append)
    assert proc.returncode is not None
    assert session_pids(proc.pid) == []
    assert len(reported) == 1 and reported[0].startswith("left 1 process(es) running"), reported
