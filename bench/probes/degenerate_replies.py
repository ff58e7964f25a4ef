"""Degenerate replies: CPU per ``/score``, event-loop stall, ``/healthz`` under load,
SIGTERM.

Families (``tests/support/degenerate.py``): a repeated opener then the answer, ``= a`` + spaces +
``b``, ``1, `` repeated, ``\\boxed{`` nested, one run of digits, a mixed reply; at 1 KB,
10 KB and 100 KB; in ``output``, ``input`` and ``supplemental_context``. Default
configuration: the offline judge in process.

1. **Per case, in process.** A worker process builds the app (``create_app`` under
   ``TestClient``, Qdrant ``:memory:``, the hashing embedder) and runs a loop-lag probe in
   the app's own event loop (a task that sleeps 1 ms and records how late it wakes). For each
   case it sends ``--repeat`` ``/score`` requests (distinct prompts, so no cache hit) and
   reports the median CPU time of the process per request (all threads) and the longest
   stall seen during the case's requests. A case still running after ``--cap`` seconds is
   recorded as ``> cap`` (the worker is killed and a fresh one goes on with the next case).
2. **Under load, a real server.** ``amaris serve`` (the same defaults, its Prefect server on
   a free port) gets 64 concurrent clients sending the 100 KB cases for ``--load-seconds``
   while a probe asks ``/healthz`` every 20 ms, from a process of its own (a monitor's view:
   the clients' own event loop, busy encoding 64 bodies of 100 KB, would delay a probe
   sharing it; that in-process figure is reported too); then SIGTERM, with the clients still
   sending: the time until the process has exited (killed past ``--cap``).

Goals: <= 20 ms CPU per ``/score`` at 100 KB, stall <= 50 ms, ``/healthz`` p99 <= 100 ms,
SIGTERM <= 5 s.

Usage::

    .venv/bin/python -m bench.probes.degenerate_replies [--code DIR] [--cap 20] [--repeat 3]
        [--load-seconds 10] [--label after] [--write] [--smoke]

``--code DIR``: the checkout whose ``amaris`` is measured (``PYTHONPATH`` of the worker and
the server), e.g. an export of an older commit; default: this one. ``--smoke``: one call per
case at 1,000 characters, then :data:`SMOKE_CLIENTS` clients sending them for 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import yaml

from amaris.app.running import free_port
from bench._common import (
    ROOT,
    Child,
    amaris_executable,
    child_env,
    doc_section,
    fmt,
    loadavg,
    markers,
    percentile,
    raise_interrupt,
    settle,
    this_script,
    wait_ready,
    work_folder,
    write_doc,
)

LOAD_CLIENTS = 64
HEALTHZ_EVERY_S = 0.02
LOAD_SIZE = 100_000
TARGET_CPU_MS = 20.0
"""CPU per ``/score`` at :data:`LOAD_SIZE` characters, any family and field."""
TARGET_STALL_MS = 50.0
TARGET_HEALTHZ_P99_MS = 100.0
TARGET_SIGTERM_S = 5.0
SMOKE_SIZE = 1_000
SMOKE_CLIENTS = 4


def families() -> ModuleType:
    """``tests/support/degenerate.py`` of this checkout, loaded by path (whatever ``--code`` is)."""
    spec = importlib.util.spec_from_file_location(
        "degenerate", ROOT / "tests" / "support" / "degenerate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- part 0: does RE2 release the interpreter lock? ---------------------------------------
def gil_check() -> tuple[float, float]:
    """(ms one RE2 search of 9 MB takes, longest gap ms of a 1 ms ticker in the main thread
    while a thread runs five of them): a small gap means RE2 matches without the lock."""
    import re2

    pattern = re2.compile(r"(?:a|b|c)*x[0-9]{1,50}(?:foo|bar)")
    text = ("abc" * 3_000_000).encode()
    started = time.perf_counter()
    pattern.search(text)
    one = time.perf_counter() - started
    thread = threading.Thread(target=lambda: [pattern.search(text) for _ in range(5)])
    gap, last = 0.0, time.perf_counter()
    thread.start()
    while thread.is_alive():
        time.sleep(0.001)
        now = time.perf_counter()
        gap, last = max(gap, now - last), now
    return one * 1000, gap * 1000


# -- part 1: the worker --------------------------------------------------------------------
def worker(cases: list[list[Any]], repeat: int, folder: Path) -> None:
    """Run ``cases`` ([family, size, field]) in this process, its data in ``folder``; one
    JSON line per case."""
    from amaris.app.wiring import create_app
    from amaris.settings import load_settings
    from tests.support.testclient import TestClient

    deg = families()
    stall = {"max": 0.0}

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.001)
            stall["max"] = max(stall["max"], loop.time() - before - 0.001)

    settings = load_settings(
        None, **{"memory.path": str(folder), "memory.embedding_model": "hashing"}
    )
    with TestClient(create_app(settings, qdrant_location=":memory:")) as client:
        assert client.portal is not None
        client.portal.start_task_soon(probe)
        client.post("/score", json={"rollout": deg.rollout("warm", "output", "42")})
        print(json.dumps({"ready": True}), flush=True)
        for n, (family, size, field) in enumerate(cases):
            text = deg.FAMILIES[family](size)
            cpu: list[float] = []
            status = ""
            stall["max"] = 0.0
            for k in range(repeat):
                item = deg.rollout(f"c{n}-{k}", field, text)
                if field != "input":
                    item["input"] = f"{deg.QUESTION} ({n}.{k})"  # no cache hit
                else:
                    item["output"] = f"{deg.ANSWER} ({n}.{k})"
                started = time.process_time()
                answer = client.post("/score", json={"rollout": item})
                cpu.append(time.process_time() - started)
                body = answer.json()
                status = f"{answer.status_code} {body.get('status') or body.get('error')}"
            row = {
                "family": family,
                "size": size,
                "field": field,
                "cpu_ms": statistics.median(cpu) * 1000,
                "stall_ms": stall["max"] * 1000,
                "status": status,
            }
            print(json.dumps(row), flush=True)


def pump(stream: Any, lines: queue.Queue[str]) -> None:
    """Every line of ``stream`` into ``lines`` (so a wait on it can time out)."""
    for line in stream:
        lines.put(line)


def run_cases(code: Path, cases: list[list[Any]], repeat: int, cap: float) -> list[dict[str, Any]]:
    """Every case through workers of ``code``; a case past ``cap`` seconds is ``> cap``."""
    rows: list[dict[str, Any]] = []
    env = {**child_env(), "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}  # -P: not the cwd's amaris
    todo = list(cases)
    # Made and removed here: a worker is killed when it is done or stuck.
    scratch = Path(tempfile.mkdtemp(prefix="amaris-bench-degenerate-"))
    try:
        return _run_workers(code, todo, repeat, cap, env, scratch, rows)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_workers(
    code: Path,
    todo: list[list[Any]],
    repeat: int,
    cap: float,
    env: dict[str, str],
    scratch: Path,
    rows: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    while todo:
        exe, *module = this_script(__spec__.name)
        proc = subprocess.Popen(
            [
                exe,
                "-P",
                *module,
                "--worker",
                json.dumps(todo),
                "--repeat",
                str(repeat),
                "--folder",
                str(Path(tempfile.mkdtemp(dir=scratch))),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=pump, args=(proc.stdout, lines), daemon=True).start()
        try:  # imports and the app's lifespan first
            started = bool(lines.get(timeout=120.0))
        except queue.Empty:
            started = False
        if not started:
            proc.kill()
            raise RuntimeError("the worker did not start within 120 s")
        wait_s = cap * repeat
        while todo:
            try:
                line = lines.get(timeout=wait_s)
            except queue.Empty:
                line = ""
            if not line:
                family, size, field = todo.pop(0)
                rows.append({"family": family, "size": size, "field": field, "capped": True})
                print(f"  {family} {size} {field}: > {cap:g} s", flush=True)
                break
            row = json.loads(line)
            rows.append(row)
            todo.pop(0)
            print(
                f"  {row['family']} {row['size']} {row['field']}: {row['cpu_ms']:.1f} ms CPU, "
                f"stall {row['stall_ms']:.1f} ms, {row['status']}",
                flush=True,
            )
            wait_s = cap * repeat
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return rows


# -- part 2: a real server under load ------------------------------------------------------
async def load(url: str, amaris: Child, args: argparse.Namespace) -> dict[str, Any]:
    """``args.clients`` clients sending cases of ``args.load_size`` characters for
    ``args.load_seconds``, /healthz polled; then SIGTERM under the same load."""
    seconds, cap = args.load_seconds, args.cap
    deg = families()
    texts = [(family, field, deg.FAMILIES[family](args.load_size)) for family in deg.FAMILIES
             for field in deg.FIELDS]  # fmt: skip
    healthz: list[float] = []
    in_flight: list[float] = []  # when the /healthz being waited for was sent
    scored: list[float] = []
    statuses: dict[str, int] = {}
    stop = asyncio.Event()
    counter = iter(range(10**9))

    async def client(http: httpx2.AsyncClient, index: int) -> None:
        while not stop.is_set():
            n = next(counter)
            _, field, text = texts[n % len(texts)]
            item = deg.rollout(f"l{n}", field, text)
            item["input" if field != "input" else "output"] += f" ({n})"
            started = time.monotonic()
            try:
                answer = await http.post("/score", json={"rollout": item})
                key = str(answer.status_code)
                if answer.status_code == 200:
                    scored.append(time.monotonic() - started)
            except httpx2.HTTPError as exc:
                key = type(exc).__name__
            statuses[key] = statuses.get(key, 0) + 1

    async def poll(http: httpx2.AsyncClient) -> None:
        while not stop.is_set():
            started = time.monotonic()
            in_flight[:] = [started]
            with suppress(httpx2.HTTPError):
                await http.get("/healthz")
            in_flight.clear()
            healthz.append(time.monotonic() - started)
            await asyncio.sleep(HEALTHZ_EVERY_S)

    limits = httpx2.Limits(max_connections=args.clients + 1)
    timeout = httpx2.Timeout(cap + seconds)
    async with (
        httpx2.AsyncClient(base_url=url, limits=limits, timeout=timeout, trust_env=False) as http,
        httpx2.AsyncClient(base_url=url, timeout=timeout, trust_env=False) as probe,
    ):
        monitor = subprocess.Popen(
            [*this_script(__spec__.name), "--probe-worker", json.dumps([url, seconds])],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        tasks = [asyncio.create_task(client(http, i)) for i in range(args.clients)]
        poller = asyncio.create_task(poll(probe))
        await asyncio.sleep(seconds)
        out, _ = await asyncio.to_thread(monitor.communicate)
        monitored = json.loads(out)
        # A /healthz still unanswered counts with the time it has waited so far.
        healthz_done = list(healthz) + [time.monotonic() - t for t in in_flight]
        statuses_done = dict(statuses)  # after SIGTERM, refused connections are expected
        scored_done = list(scored)
        sent = time.monotonic()
        amaris.popen.send_signal(signal.SIGTERM)
        exit_s: float | None = None
        while time.monotonic() - sent < cap:
            if amaris.popen.poll() is not None:
                exit_s = time.monotonic() - sent
                break
            await asyncio.sleep(0.05)
        stop.set()
        for task in [*tasks, poller]:
            task.cancel()
        await asyncio.gather(*tasks, poller, return_exceptions=True)
    return {
        "monitor_n": len(monitored),
        "monitor_p50_ms": percentile(monitored, 50) * 1000,
        "monitor_p99_ms": percentile(monitored, 99) * 1000,
        "monitor_max_ms": max(monitored) * 1000,
        "healthz_n": len(healthz_done),
        "healthz_p99_ms": percentile(healthz_done, 99) * 1000,
        "healthz_max_ms": max(healthz_done) * 1000,
        "scored": len(scored_done),
        "score_p50_ms": percentile(scored_done, 50) * 1000,
        "statuses": statuses_done,
        "sigterm_s": exit_s,
    }


def probe_worker(url: str, seconds: float) -> None:
    """The monitor: ``/healthz`` every 20 ms for ``seconds``, from its own process; prints
    the latencies (s) as JSON. A probe unanswered at the end counts with its wait so far."""
    latencies: list[float] = []
    end = time.monotonic() + seconds
    with httpx2.Client(base_url=url, timeout=seconds + 5, trust_env=False) as http:
        while time.monotonic() < end:
            started = time.monotonic()
            with suppress(httpx2.HTTPError):
                http.get("/healthz")
            latencies.append(time.monotonic() - started)
            time.sleep(HEALTHZ_EVERY_S)
    print(json.dumps(latencies))


def serve_under_load(args: argparse.Namespace) -> dict[str, Any]:
    exe = amaris_executable()
    env = {**child_env(), "PYTHONPATH": str(args.code)}
    with work_folder("amaris-bench-degenerate-serve-", None) as folder:
        port = free_port()
        config = {
            "server": {"host": "127.0.0.1", "port": port},
            "memory": {"path": str(folder / "data"), "embedding_model": "hashing"},
            "prefect": {"port": free_port(), "repair_interval_seconds": None},
            "logging": {"level": "WARNING"},
        }
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        amaris = Child(
            "amaris", [exe, "serve", "--config", str(path)], folder / "amaris.log", folder, env
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(amaris, f"{url}/healthz", lambda r: r.status_code == 200)
            settle(amaris)
            return asyncio.run(load(url, amaris, args))
        finally:
            amaris.stop()


# -- report --------------------------------------------------------------------------------
def cell(row: dict[str, Any], key: str) -> str:
    return "> cap" if row.get("capped") else fmt(row[key])


def section_name(label: str | None) -> str:
    """This run's section of docs/benchmarks.md: one per ``--label``."""
    return "degenerate_replies" + (f"-{label}" if label else "")


def by_size(rows: list[dict[str, Any]]) -> str:
    """Per size, the worst case over families and fields: the page's table."""
    lines = [
        "| reply size | cases | CPU ms per `/score`, worst (family, field) | longest event-loop "
        "stall (ms) |",
        "|---:|---:|---|---:|",
    ]
    for size in sorted({r["size"] for r in rows}):
        mine = [r for r in rows if r["size"] == size]
        capped = [r for r in mine if r.get("capped")]
        worst = max(mine, key=lambda r: r["cpu_ms"] if not r.get("capped") else float("inf"))
        cpu = "> cap" if capped else f"{worst['cpu_ms']:.1f} ({worst['family']}, {worst['field']})"
        stall = "> cap" if capped else fmt(max(r["stall_ms"] for r in mine))
        lines.append(f"| {size:,} | {len(mine)} | {cpu} | {stall} |")
    return "\n".join(lines)


def report(
    rows: list[dict[str, Any]], served: dict[str, Any], args: argparse.Namespace, load0: str
) -> str:
    large = [r for r in rows if r["size"] == args.load_size]
    targets: list[tuple[str, str, str]] = []
    if large:
        capped = any(r.get("capped") for r in large)
        cpu = max((r["cpu_ms"] for r in large if not r.get("capped")), default=float("nan"))
        stall = max((r["stall_ms"] for r in large if not r.get("capped")), default=float("nan"))
        targets += [
            (
                f"CPU per `/score` at {args.load_size:,} characters <= {TARGET_CPU_MS:g} ms",
                "> cap" if capped else f"{cpu:.1f} ms",
                "PASS" if not capped and cpu <= TARGET_CPU_MS else "FAIL",
            ),
            (
                f"event-loop stall <= {TARGET_STALL_MS:g} ms",
                "> cap" if capped else f"{stall:.1f} ms",
                "PASS" if not capped and stall <= TARGET_STALL_MS else "FAIL",
            ),
        ]
    if served:
        p99, sig = served["monitor_p99_ms"], served["sigterm_s"]
        targets += [
            (
                f"`/healthz` p99 <= {TARGET_HEALTHZ_P99_MS:g} ms under {args.clients} clients "
                "sending the largest cases",
                f"{fmt(p99)} ms ({served['monitor_n']} probes from a process of its own)",
                "PASS" if p99 <= TARGET_HEALTHZ_P99_MS else "FAIL",
            ),
            (
                f"SIGTERM under that load: exit <= {TARGET_SIGTERM_S:g} s",
                f"{sig:.2f} s" if sig is not None else f"> {args.cap:g} s (killed)",
                "PASS" if sig is not None and sig <= TARGET_SIGTERM_S else "FAIL",
            ),
        ]
    return doc_section(
        section_name(args.label),
        f"Degenerate replies{f' ({args.label})' if args.label else ''}: CPU per /score, "
        "event-loop stall, /healthz under load, SIGTERM",
        "Six families of degenerate reply (`tests/support/degenerate.py`) at each size in "
        "`output`, `input` and `supplemental_context`, the default configuration (offline "
        f"judge in process): CPU per `/score` (median of {args.repeat}, the whole process) and "
        "the longest event-loop stall; then a real `amaris serve` under load, and SIGTERM."
        + ("" if args.code == ROOT else f" Code: `{args.code_label}`."),
        by_size(rows) if rows else "(cases not run)",
        script=__file__,
        load=f"{load0} -> {loadavg()}",
        targets=targets,
    )


def details(rows: list[dict[str, Any]], served: dict[str, Any], args: argparse.Namespace) -> str:
    """Every case, the interpreter-lock check and the load figures (printed)."""
    fields = list(dict.fromkeys(r["field"] for r in rows))
    lines: list[str] = []
    if rows:
        lines += [
            "",
            "CPU ms per `/score` (median of "
            f"{args.repeat}, the whole process) / longest event-loop stall ms, by field:",
            "",
            "| family | size | " + " | ".join(f"{f}: CPU / stall" for f in fields) + " |",
            "|---|---|" + "---|" * len(fields),
        ]
    keys = list(dict.fromkeys((r["family"], r["size"]) for r in rows))
    for family, size in keys:
        cells = []
        for field in fields:
            row = next(
                r for r in rows if (r["family"], r["size"], r["field"]) == (family, size, field)
            )
            cells.append(f"{cell(row, 'cpu_ms')} / {cell(row, 'stall_ms')}")
        lines.append(f"| {family} | {size:,} | " + " | ".join(cells) + " |")
    if rows:
        answers: dict[str, int] = {}
        for row in rows:
            answers[row["status"]] = answers.get(row["status"], 0) + 1
        lines += ["", f"Answers of the last request of each case: {answers}."]
    one, gap = args.gil
    lines += [
        "",
        f"RE2 and the interpreter lock: one RE2 search of 9 MB takes {one:.0f} ms; while a "
        f"thread runs five, a 1 ms ticker in the main thread is at most {gap:.1f} ms late: "
        "RE2 matches without the lock (the binding releases it), so a match in a worker "
        "thread does not stall the event loop.",
    ]
    if served:
        sig = served["sigterm_s"]
        lines += [
            "",
            f"`amaris serve` with {args.clients} clients sending the {args.load_size:,}-character "
            "cases for "
            f"{args.load_seconds:g} s: `/healthz` from a monitor process p99 "
            f"{fmt(served['monitor_p99_ms'])} ms, p50 {fmt(served['monitor_p50_ms'])} ms, max "
            f"{fmt(served['monitor_max_ms'])} ms ({served['monitor_n']} probes); from a probe "
            f"in the clients' own event loop p99 {fmt(served['healthz_p99_ms'])} ms, max "
            f"{fmt(served['healthz_max_ms'])} ms ({served['healthz_n']} probes); `/score` "
            f"answered {served['scored']} before SIGTERM (p50 {fmt(served['score_p50_ms'])} ms; "
            f"statuses {served['statuses']}); SIGTERM under that load: "
            + (f"exited after {sig:.2f} s." if sig is not None else f"> {args.cap:g} s (killed)."),
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--cap", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--load-seconds", type=float, default=10.0)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--no-load", action="store_true", help="skip the real-server part")
    parser.add_argument("--no-cases", action="store_true", help="only the real-server part")
    parser.add_argument("--label", default=None)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--folder", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--smoke", action="store_true", help=f"{SMOKE_SIZE:,} characters, {SMOKE_CLIENTS} clients"
    )
    parser.add_argument("--probe-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke and args.write:
        parser.error("--smoke: its figures do not go to docs/benchmarks.md")
    args.clients, args.load_size = LOAD_CLIENTS, LOAD_SIZE
    if args.smoke:
        args.repeat, args.load_seconds, args.sizes = 1, 1.0, str(SMOKE_SIZE)
        args.clients, args.load_size = SMOKE_CLIENTS, SMOKE_SIZE
    if args.probe_worker is not None:
        probe_worker(*json.loads(args.probe_worker))
        return 0
    if args.worker is not None:
        worker(json.loads(args.worker), args.repeat, Path(args.folder))
        return 0
    signal.signal(signal.SIGTERM, raise_interrupt)
    args.code = args.code.resolve()
    args.code_label = "this checkout" if args.code == ROOT else str(args.code)
    deg = families()
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = [[f, s, field] for f in deg.FAMILIES for s in sizes for field in deg.FIELDS]
    load0 = loadavg()
    args.gil = gil_check()
    rows = [] if args.no_cases else run_cases(args.code, cases, args.repeat, args.cap)
    served = {} if args.no_load else serve_under_load(args)
    text = report(rows, served, args, load0)
    print(details(rows, served, args))
    print(text)
    if args.write:
        write_doc(ROOT / "docs" / "benchmarks.md", text, *markers(section_name(args.label)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
