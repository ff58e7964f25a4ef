"""Time to append rollouts to the embedded rollout log, as ``/score`` does before it answers.

In a temporary folder under the current directory (this machine's disk), for each backend:
``--count`` records appended one at a time, then in batches of ``--batch`` (the group
commit's batches under load). Backends:

- ``qdrant``: the Qdrant collection log in a Qdrant local-mode folder
  (``QdrantRolloutLog``; the embedded store's log before SQLite);
- ``sqlite-full``: ``SqliteRolloutLog``, WAL, ``synchronous=FULL`` (the embedded default);
- ``sqlite-normal``: the same with ``synchronous=NORMAL``.

Prints ms per append and per record, and the load average.

Usage::

    .venv/bin/python -m bench.performance.rollout_append [--count 300] [--batch 16] [--backends ...]
        [--smoke]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from qdrant_client import QdrantClient

from amaris.memory.qdrant_rollout_log import QdrantRolloutLog
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_log import RolloutLog
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog, Synchronous

Opener = Callable[[Path], tuple[RolloutLog, Callable[[], None]]]


def _qdrant(folder: Path) -> tuple[RolloutLog, Callable[[], None]]:
    client = QdrantClient(path=str(folder))
    return QdrantRolloutLog(client, "bench"), client.close


def _sqlite(synchronous: Synchronous) -> Opener:
    def open_log(folder: Path) -> tuple[RolloutLog, Callable[[], None]]:
        log = SqliteRolloutLog(folder / "log.sqlite3", "bench", synchronous=synchronous)
        return log, log.close

    return open_log


BACKENDS: dict[str, Opener] = {
    "qdrant": _qdrant,
    "sqlite-full": _sqlite("full"),
    "sqlite-normal": _sqlite("normal"),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--backends", nargs="+", choices=sorted(BACKENDS), default=list(BACKENDS))
    parser.add_argument("--smoke", action="store_true", help="4 records, batches of 2")
    args = parser.parse_args(argv)
    if args.smoke:
        args.count, args.batch = 4, 2
    record = RolloutRecord.model_validate(
        {
            "rollout": {"id": "r", "input": "x" * 400, "output": "y" * 800},
            "score": 0.5,
            "verdicts": [{"id": "a1", "verdict": 4, "reason": "ok"}],
        }
    )
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}", flush=True)
    for name in args.backends:
        with tempfile.TemporaryDirectory(prefix="amaris-bench-", dir=".") as folder:
            log, close = BACKENDS[name](Path(folder))
            started = time.perf_counter()
            for _ in range(args.count):
                log.append(0, record)
            one = (time.perf_counter() - started) / args.count * 1000
            started = time.perf_counter()
            batches = max(1, args.count // args.batch)
            for _ in range(batches):
                log.append_many([(1, record)] * args.batch)
            many = (time.perf_counter() - started) / batches * 1000
            logged = log.count(0) + log.count(1)
            close()
        print(
            f"{name}: one at a time: {one:.3f} ms per append; batches of {args.batch}: "
            f"{many:.3f} ms per append, {many / args.batch:.3f} ms per record; "
            f"{logged} records logged",
            flush=True,
        )
    print(f"load average (1 min) at end: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
