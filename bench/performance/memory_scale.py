"""Scale of the pipeline's storage in embedded Qdrant over a simulated long run.

Fills a local-mode Qdrant folder (a temporary one unless ``--folder``) as a training run
would: per step, ``--rollouts`` appends to the rollout log one at a time (as the
``/score`` hot path does; the embedded store's log, SQLite beside the Qdrant folder), a
step-registry update, the full analyses, ``--docs`` digest documents (HashingEmbedder, to
keep the run quick: search cost does not depend on the embedder), and retention: the
rollouts of step ``s - retention`` are archived to JSONL and dropped, and so are its
analyses. Then measures the reads of the step path, and the cost of a restart in a fresh
child process (this one's heap holds the whole run).

Not a test: run on demand. It takes minutes with the defaults on 2 cores; wall-clock
figures depend on what else runs, so the CPU time and load average are printed too.

Usage::

    .venv/bin/python -m bench.performance.memory_scale [--steps 500] [--rollouts 512]
        [--retention 8] [--docs 10] [--record-chars 2000] [--folder DIR] [--smoke]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from qdrant_client import QdrantClient

from amaris.memory.embedder import HashingEmbedder
from amaris.memory.models import MemoryDocument
from amaris.memory.records import RolloutRecord
from amaris.memory.rollout_backend import SQLITE_FILE
from amaris.memory.rollout_log import RolloutLog, StepRegistry
from amaris.memory.sqlite_rollout_log import SqliteRolloutLog
from amaris.memory.store import MemoryStore
from bench._common import ROOT, this_script

PREFIX = "bench"
T = TypeVar("T")
WORDS = ("answer", "grader", "hedging", "candidate", "several", "verbose", "padding", "polite",
         "short", "correct", "wrong", "reasoning", "step", "final", "proof", "sycophancy",
         "flattery", "format", "json", "rubric", "criterion", "weight", "policy", "model",
         "reward", "hacking", "manipulation", "evidence", "severity", "summary", "behaviour",
         "test", "unit", "number", "integer", "equation", "derivative", "integral")  # fmt: skip


def _rss_mb() -> tuple[float, float]:
    """Current and peak resident memory of this process, in MB (Linux)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:chars]


def _timed_each(items: list[T], fn: Callable[[T], Any]) -> list[float]:
    """Milliseconds of ``fn(item)`` for each item."""
    times = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - start) * 1000)
    return times


class _GcPauses:
    """Longest pause of the garbage collector's full (generation 2) collections."""

    def __init__(self) -> None:
        self.count = 0
        self.longest_ms = 0.0
        self._start = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
            return
        self.count += 1
        self.longest_ms = max(self.longest_ms, (time.perf_counter() - self._start) * 1000)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _open(folder: Path) -> tuple[QdrantClient, RolloutLog, StepRegistry, MemoryStore]:
    client = QdrantClient(path=str(folder / "qdrant"))
    return (
        client,
        SqliteRolloutLog(folder / SQLITE_FILE, PREFIX),
        StepRegistry(client, PREFIX),
        MemoryStore(client, PREFIX, HashingEmbedder()),
    )


def _documents(rng: random.Random, step: int, count: int) -> list[MemoryDocument]:
    # Roughly what a chunked step leaves: chunk summaries, a meta summary, an update,
    # a few findings.
    kinds = ["meta_summary", "rubric_update"] + ["batch_summary"] * max(0, count - 4)
    kinds += ["finding"] * (count - len(kinds))
    docs = []
    for index, kind in enumerate(kinds[:count]):
        key = {"meta_summary": "meta", "rubric_update": "update"}.get(kind, f"k{index}")
        if kind == "batch_summary":
            key = f"chunk-{index - 2}"
        text = _text(rng, 1500)
        docs.append(
            MemoryDocument.model_validate(
                {"type": kind, "step": step, "key": key, "text": text, "doc": {"text": text}}
            )
        )
    return docs


def run(args: argparse.Namespace) -> None:
    """Simulate the run, then print the measurements."""
    rng = random.Random(7)
    pauses = _GcPauses()
    root = Path(args.folder) if args.folder else Path(tempfile.mkdtemp(prefix="amaris-bench-"))
    client, log, steps, memory = _open(root)
    append_ms: list[float] = []
    load_ms: list[float] = []
    step_ms: list[float] = []
    started = time.perf_counter()
    cpu_started = time.process_time()
    for step in range(args.steps):
        step_start = time.perf_counter()
        for i in range(args.rollouts):
            record = RolloutRecord.model_validate(
                {
                    "rollout": {
                        "id": f"r{step}-{i}",
                        "input": _text(rng, 300),
                        "output": _text(rng, args.record_chars),
                    },
                    "scope": "global",
                    "score": rng.random(),
                    "status": "scored",
                    "rubric_version": 1 + step // 10,
                    "request_id": f"q{step}-{i}",
                    "verdicts": [{"id": "A1", "verdict": 4, "reason": "ok"}],
                }
            )
            begin = time.perf_counter()
            log.append(step, record)
            append_ms.append((time.perf_counter() - begin) * 1000)
        steps.set(step, status="completing", rollout_count=args.rollouts)
        begin = time.perf_counter()
        log.load_step(step)
        load_ms.append((time.perf_counter() - begin) * 1000)
        analyses = [(f"r{step}-{i}", {"summary": _text(rng, 800)}) for i in range(args.rollouts)]
        memory.put_analyses("global", step, analyses)
        memory.add_documents(_documents(rng, step, args.docs))
        steps.set(step, status="done", rubric_versions={"global": 1 + step // 10})
        old = step - args.retention
        if old >= 0:
            log.archive_step(old, root / "rollouts")
            log.drop_step(old)
            memory.drop_analyses("global", old, [f"r{old}-{i}" for i in range(args.rollouts)])
        step_ms.append((time.perf_counter() - step_start) * 1000)
        if step % 50 == 0 or step == args.steps - 1:
            print(
                f"step {step:4d}: {time.perf_counter() - started:7.1f} s, "
                f"append p50 {_pct(append_ms[-args.rollouts :], 0.5):.3f} ms, "
                f"RSS {_rss_mb()[0]:.0f} MB",
                flush=True,
            )
    fill_s = time.perf_counter() - started
    fill_cpu_s = time.process_time() - cpu_started

    queries = [_text(rng, 120) for _ in range(30)]
    last = args.steps - 1
    search_ms = _timed_each(
        queries, lambda q: memory.search(q, limit=3, exclude_step=last, scope="global")
    )
    selective_ms = _timed_each(
        queries, lambda q: memory.search(q, limit=3, types={"rubric_update"})
    )
    recent_ms = _timed_each(
        list(range(30)), lambda _: memory.recent_summaries("global", args.steps, 5)
    )
    rss, peak = _rss_mb()
    digest = sum(sum(c.values()) for c in memory.counts_by_type_and_step().values())
    log.close()
    client.close()

    # In a fresh process, as after a restart: this one's heap holds the whole run.
    child = subprocess.run(
        [*this_script(__spec__.name), "--reopen", str(root), "--steps", str(args.steps)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    reopen = json.loads(child.stdout.strip().splitlines()[-1])
    sizes = {p.name: p.stat().st_size for p in (root / "qdrant").rglob("*.sqlite*")}
    disk_mb = sum(sizes.values()) / 1e6
    archive_mb = sum(p.stat().st_size for p in (root / "rollouts").glob("*.jsonl")) / 1e6
    if not args.folder:
        shutil.rmtree(root)

    rows = [
        (
            "run",
            f"{args.steps} steps x {args.rollouts} rollouts, retention {args.retention}, "
            f"{args.docs} docs/step, output {args.record_chars} chars",
        ),
        ("fill time", f"{fill_s:.1f} s ({statistics.mean(step_ms):.0f} ms/step mean)"),
        (
            "append latency p50 / p99 / max",
            f"{_pct(append_ms, 0.5):.3f} / {_pct(append_ms, 0.99):.3f} / {max(append_ms):.1f} ms",
        ),
        (
            "append p50 first step / last step",
            f"{_pct(append_ms[: args.rollouts], 0.5):.3f} / "
            f"{_pct(append_ms[-args.rollouts :], 0.5):.3f} ms",
        ),
        (
            f"load_step ({args.rollouts} rollouts) p50 / max",
            f"{_pct(load_ms, 0.5):.1f} / {max(load_ms):.1f} ms",
        ),
        (
            f"search over {digest} docs, limit 3, scope+step filter p50 / p99",
            f"{_pct(search_ms, 0.5):.1f} / {_pct(search_ms, 0.99):.1f} ms",
        ),
        ("search, types={rubric_update} (selective) p50", f"{_pct(selective_ms, 0.5):.1f} ms"),
        ("recent_summaries(5) p50", f"{_pct(recent_ms, 0.5):.2f} ms"),
        ("RSS at end / peak", f"{rss:.0f} / {peak:.0f} MB"),
        ("full GC collections / longest", f"{pauses.count} / {pauses.longest_ms:.0f} ms"),
        (
            "reopen in a new process (open + stores + seq recovery)",
            f"{reopen['seconds']:.2f} s (recovered seq {reopen['recovered']})",
        ),
        (
            "RSS of that process: before / after opening",
            f"{reopen['rss_before']:.0f} / {reopen['rss_after']:.0f} MB",
        ),
        (
            "CPU time of the fill / load average at end",
            f"{fill_cpu_s:.0f} s / {os.getloadavg()[0]:.1f}",
        ),
        ("sqlite on disk / JSONL archive", f"{disk_mb:.0f} / {archive_mb:.0f} MB"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def reopen(folder: Path, steps: int) -> None:
    """Open the stores of ``folder`` and print a JSON line of timings (the child process)."""
    rss_before, _ = _rss_mb()
    start = time.perf_counter()
    client, log, _, _ = _open(folder)
    recovered = log.count(steps - 1)
    seconds = time.perf_counter() - start
    rss_after, _ = _rss_mb()
    log.close()
    client.close()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "recovered": recovered,
                "rss_before": rss_before,
                "rss_after": rss_after,
            }
        )
    )


SMOKE = {"steps": 3, "rollouts": 4, "retention": 1, "docs": 4, "record_chars": 50}
"""``--smoke``: the sizes that still archive and drop a step."""


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rollouts", type=int, default=512)
    parser.add_argument("--retention", type=int, default=8)
    parser.add_argument("--docs", type=int, default=10, help="digest documents per step")
    parser.add_argument("--record-chars", type=int, default=2000, help="rollout output size")
    parser.add_argument("--folder", help="keep the data here instead of a temporary folder")
    parser.add_argument("--smoke", action="store_true", help="3 steps x 4 rollouts, retention 1")
    parser.add_argument("--reopen", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    if args.reopen:
        reopen(Path(args.reopen), args.steps)
    else:
        run(args)


if __name__ == "__main__":
    main()
