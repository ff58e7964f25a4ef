"""Time to append one rollout to the embedded rollout log (a Qdrant folder), as ``/score``
does before it answers.

Opens ``QdrantClient(path=<temporary folder>)``, builds ``RolloutLog`` (which creates its
collections through ``amaris.memory.qdrant.ensure_collection``) and appends ``--count``
records one at a time, then in batches of ``--batch``. Prints ms per append and per record.
Run it at two commits to compare (e.g. before and after a change to the SQLite tuning).

Usage::

    .venv/bin/python bench/rollout_append.py [--count 300] [--batch 16]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from qdrant_client import QdrantClient

from amaris.memory.rollout_log import RolloutLog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    record = {
        "rollout": {"input": "x" * 400, "output": "y" * 800},
        "reward": 0.5,
        "verdicts": [{"id": "a1", "score": 4, "reason": "ok"}],
    }
    with tempfile.TemporaryDirectory(prefix="amaris-bench-", dir=".") as folder:
        client = QdrantClient(path=folder)
        log = RolloutLog(client, "bench")
        started = time.perf_counter()
        for _ in range(args.count):
            log.append(0, record)
        one = (time.perf_counter() - started) / args.count * 1000
        started = time.perf_counter()
        batches = max(1, args.count // args.batch)
        for _ in range(batches):
            log.append_many([(1, record)] * args.batch)
        many = (time.perf_counter() - started) / batches * 1000
        client.close()
    print(
        f"one at a time: {one:.3f} ms per append; batches of {args.batch}: "
        f"{many:.3f} ms per append, {many / args.batch:.3f} ms per record",
        flush=True,
    )


if __name__ == "__main__":
    main()
