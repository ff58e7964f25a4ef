"""CPU that ``amaris serve`` and the processes it started use while no request comes: what
an idle service costs its machine, and what it takes from ``/score`` under load.

Starts the offline LLM and ``amaris serve`` as ``bench.performance.score_throughput`` does
(``bench._common.running_stack``), waits until the tree has settled after start-up, then
reads each process's CPU (``/proc/<pid>/stat``) over ``--seconds`` and prints it per
second of wall time.

Usage::

    .venv/bin/python -m bench.performance.serve_idle_cpu [--seconds 60]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench._common import loadavg, running_stack, settle
from bench.performance.serve_boot_cpu import cpu_of, descendants


def command(pid: int) -> str:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    return raw.decode(errors="replace").strip()[:100]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, running_stack(200, Path(folder), {}) as stack:
        settle(stack.amaris)
        pids = [stack.amaris.pid, *descendants(stack.amaris.pid)]
        names = {pid: command(pid) for pid in pids}
        before = {pid: cpu_of(pid) for pid in pids}
        print(f"measuring {args.seconds:g} s, load {loadavg()}", flush=True)
        time.sleep(args.seconds)
        after = {pid: cpu_of(pid) for pid in pids}
    print("| CPU ms a second | process |\n|---:|---|")
    for pid in pids:
        print(f"| {(after[pid] - before[pid]) / args.seconds * 1000:.1f} | `{names[pid]}` |")


if __name__ == "__main__":
    main()
