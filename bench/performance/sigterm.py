"""How long ``amaris serve`` takes to exit on SIGTERM, at several moments of its life.

Each trial starts ``amaris serve`` on a fresh temporary data folder (its own Prefect
server, the scheduled-repair worker on) judging through ``amaris offline-llm`` (a slow
judge, so a step's flow takes seconds), sends SIGTERM at one moment and measures the
time until the process has exited, its exit code, and the processes it left running
(its Prefect server, its repair worker) once it is gone. Moments:

- ``0.5``, ``2``, ``5``: seconds after the process was spawned (start-up: imports,
  storage, the Prefect server booting);
- ``ready``: once ``/healthz`` answers and the pipeline's Prefect warm-up is over
  (the process idle);
- ``step``: while a step's flow runs (12 rollouts, analyses in progress);
- ``wait``: the same, with a client blocked in ``GET /rubric_status/wait`` for the step
  (what a trainer does at a step boundary).

Target: the process gone within 5 s of SIGTERM at every moment, leaving no process behind.

Usage::

    .venv/bin/python -m bench.performance.sigterm [--moments 0.5,2,5,ready,step] [--repeat 2]
        [--write] [--smoke]

Prints a table; ``--write`` replaces the ``sigterm`` section of ``docs/benchmarks.md``.
``--smoke``: one trial at :data:`SMOKE_MOMENTS` (during start-up, and a waiter during a step).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx2
import yaml

from amaris.app.running import free_port, session_pids
from bench._common import (
    ROOT,
    Child,
    amaris_executable,
    child_env,
    doc_section,
    loadavg,
    markers,
    raise_interrupt,
    settle,
    start_offline_llm,
    wait_ready,
    work_folder,
    write_doc,
)

TARGET_EXIT_S = 5.0
"""Exit within this many seconds of SIGTERM, at every moment."""
EXIT_DEADLINE_S = 180.0
"""How long a trial waits for the exit before it kills the process (and reports that)."""
LLM_LATENCY_MS = 400.0
STEP_ROLLOUTS = 12
WAITER_IN_FLIGHT_S = 0.5
SMOKE_MOMENTS = "0.5,wait"


def analyzer_calls(data: Path) -> int:
    """Analyzer calls in the call log so far."""
    path = data / "logs" / "llm_calls.jsonl"
    if not path.is_file():
        return 0
    return sum(
        1
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line).get("agent") == "analyzer"
    )


def start_step(url: str, data: Path, amaris: Child) -> None:
    """Score a step's rollouts, complete it, and return once its analyses are running."""
    with httpx2.Client(base_url=url, timeout=60.0, trust_env=False) as client:
        for i in range(STEP_ROLLOUTS):
            body = {
                "rollout": {
                    "id": f"r{i}",
                    "input": "What is 6 * 7?",
                    "output": f"6 * 7 = {42 if i % 2 else 41}",
                    "supplemental_context": "Answer: 42",
                },
                "metadata": {"high_level_goal": "math", "current_step": 0, "total_steps": 10},
            }
            response = client.post("/score", json=body)
            response.raise_for_status()
        client.post("/complete", json={"step": 0}).raise_for_status()
    deadline = time.monotonic() + EXIT_DEADLINE_S
    while analyzer_calls(data) < 1:
        if not amaris.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the step's analyses did not start:\n{amaris.log_tail()}")
        time.sleep(0.05)


class Waiter:
    """A client blocked in ``GET /rubric_status/wait`` for step 0, in a thread."""

    def __init__(self, url: str) -> None:
        self._answer = "no answer"
        self._thread = threading.Thread(target=self._wait, args=(url,), daemon=True)
        self._thread.start()
        time.sleep(WAITER_IN_FLIGHT_S)  # the request reaches the handler meanwhile

    def _wait(self, url: str) -> None:
        try:
            response = httpx2.get(
                f"{url}/rubric_status/wait",
                params={"step": 0},
                timeout=EXIT_DEADLINE_S,
                trust_env=False,
            )
            body = response.json()
            self._answer = f"{response.status_code} {body.get('status') or body.get('error')}"
        except httpx2.HTTPError as exc:
            self._answer = type(exc).__name__

    def result(self) -> str:
        """What the client got: status code and wait status, or the transport error."""
        self._thread.join(EXIT_DEADLINE_S)
        return self._answer


def trial(moment: str, folder: Path, exe: str, env: dict[str, str], llm_url: str) -> dict[str, Any]:
    """One ``amaris serve``, one SIGTERM at ``moment``: exit time, code, leftovers."""
    folder.mkdir(parents=True)
    port = free_port()
    data = folder / "data"
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        # The offline judge on 127.0.0.1 stands for a hosted one: no per-endpoint
        # limit (a judge on this machine gets 4 in flight by default).
        "client": {"default": {"base_url": llm_url, "api_key": "bench", "max_concurrency": 0}},
        "concurrency": {"analyzer": 1},
        "memory": {"path": str(data), "embedding_model": None},
        "prefect": {"port": free_port(), "repair_interval_seconds": 60},
        "logging": {"level": "INFO"},
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    spawned = time.monotonic()
    amaris = Child(
        "amaris", [exe, "serve", "--config", str(path)], folder / "amaris.log", folder, env
    )
    url = f"http://127.0.0.1:{port}"
    waiter: Waiter | None = None
    try:
        if moment in {"ready", "step", "wait"}:
            wait_ready(amaris, f"{url}/healthz", lambda r: r.status_code == 200)
            settle(amaris)
            if moment in {"step", "wait"}:
                start_step(url, data, amaris)
            if moment == "wait":
                waiter = Waiter(url)
        else:
            time.sleep(max(0.0, spawned + float(moment) - time.monotonic()))
        at = time.monotonic() - spawned
        sent = time.monotonic()
        amaris.popen.send_signal(signal.SIGTERM)
        try:
            code: int | None = amaris.popen.wait(EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            code = None
        exit_s = time.monotonic() - sent
        # What it left: the Prefect server and repair worker get SIGTERM from the kernel
        # when amaris dies (PR_SET_PDEATHSIG); a clean exit stops them before.
        left = len(session_pids(amaris.pid))
        row = {"moment": moment, "at_s": at, "exit_s": exit_s, "code": code, "left": left}
        if waiter is not None:
            row["waiter"] = waiter.result()
        return row
    finally:
        amaris.stop()


def waited(row: dict[str, Any]) -> str:
    return f", the waiter got: {row['waiter']}" if "waiter" in row else ""


def section(label: str | None) -> str:
    """The name of this run's section of docs/benchmarks.md."""
    if not label:
        return "sigterm"
    return "sigterm-" + "".join(ch if ch.isalnum() else "-" for ch in label.lower())


def report(
    rows: list[dict[str, Any]], moments: list[str], repeat: int, label: str | None, load: str
) -> str:
    lines = [
        "| moment | sent at (s) | exit (s), each trial | max exit (s) | exit codes | left "
        "| waiter got |",
        "|---|---:|---|---:|---|---|---|",
    ]
    for moment in moments:
        mine = [r for r in rows if r["moment"] == moment]
        if not mine:
            continue
        exits = [r["exit_s"] for r in mine]
        lines.append(
            f"| {moment} | {statistics.median(r['at_s'] for r in mine):.1f} | "
            f"{', '.join(f'{e:.2f}' for e in exits)} | {max(exits):.2f} | "
            f"{', '.join(str(r['code']) for r in mine)} | "
            f"{', '.join(str(r['left']) for r in mine)} | "
            f"{', '.join(r['waiter'] for r in mine if 'waiter' in r) or '-'} |"
        )
    worst = max((r["exit_s"] for r in rows), default=float("nan"))
    left = sum(r["left"] for r in rows)
    return doc_section(
        section(label),
        f"SIGTERM: exit time of `amaris serve`{f' ({label})' if label else ''}",
        f"SIGTERM to `amaris serve` (its Prefect server and repair worker, a {LLM_LATENCY_MS:g} "
        f"ms offline judge) at moments of its life, {repeat} trial(s) each: seconds after spawn, "
        f"idle (`ready`), during a {STEP_ROLLOUTS}-rollout step (`step`), and with a client in "
        "`GET /rubric_status/wait` (`wait`); exit code -15: still importing, ended at once; "
        "left: its processes still running once it is gone.",
        "\n".join(lines),
        script=__file__,
        load=f"{load} -> {loadavg()}",
        targets=[
            (
                f"exit within {TARGET_EXIT_S:g} s at every moment, nothing left",
                f"{worst:.2f} s at most, {left} left",
                "PASS" if worst <= TARGET_EXIT_S and left == 0 else "FAIL",
            )
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--moments", default="0.5,2,5,10,ready,step,wait")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None, help="keep the files here")
    parser.add_argument(
        "--label", default=None, help="a name for this run (e.g. 'before'): its own section"
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--smoke", action="store_true", help=f"one trial at {SMOKE_MOMENTS}")
    args = parser.parse_args(argv)
    if args.smoke and args.write:
        parser.error("--smoke: its figures do not go to docs/benchmarks.md")
    if args.smoke:
        args.moments, args.repeat = SMOKE_MOMENTS, 1
    moments = [m.strip() for m in args.moments.split(",") if m.strip()]
    for moment in moments:
        if moment not in {"ready", "step", "wait"}:
            float(moment)  # fails early on a typo
    signal.signal(signal.SIGTERM, raise_interrupt)
    exe = amaris_executable()
    env = child_env(own_prefect=True)  # what it leaves behind is measured
    rows: list[dict[str, Any]] = []
    load = loadavg()
    with work_folder("amaris-sigterm-", args.keep) as workdir:
        llm, llm_url = start_offline_llm(exe, LLM_LATENCY_MS, workdir, env)
        try:
            wait_ready(llm, f"{llm_url}/models", lambda r: bool(r.json().get("data")))
            for n in range(args.repeat):
                for moment in moments:
                    row = trial(moment, workdir / f"{moment}-{n}", exe, env, llm_url)
                    rows.append(row)
                    print(
                        f"{moment:>5}: SIGTERM at {row['at_s']:.1f} s, exit after "
                        f"{row['exit_s']:.2f} s, code {row['code']}, {row['left']} "
                        f"process(es) left{waited(row)}",
                        flush=True,
                    )
        finally:
            llm.stop()
    text = report(rows, moments, args.repeat, args.label, load)
    print(text)
    if args.write:
        write_doc(ROOT / "docs" / "benchmarks.md", text, *markers(section(args.label)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
