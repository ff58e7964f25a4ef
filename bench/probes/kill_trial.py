"""Kill trials: ``kill -9`` of ``amaris serve`` at random moments, then a restart on the
same data folder; is every acknowledged rollout still there, and does any step have two
rubric versions?

Setup: ``amaris offline-llm`` (the offline judge as an OpenAI-compatible server, no key)
and ``amaris serve`` judging through it, with manual step completion and one Prefect
server for all its restarts (started here: booting one per restart would take most of
the run). A driver thread plays a trainer: per step it sends the step's rollouts (the
seeded ``amaris simulate`` policy, ids ``s<step>-r<i>``) over HTTP from a few
clients, records each one acknowledged (a 2xx answer ``scored`` or ``unscored``),
then ``POST /complete`` and ``GET /rubric_status/wait``; on a connection error it waits
for the server to be back and sends the same request again (a trainer's retry).

The main thread kills: alternately during scoring and during the step's pipeline, at a
random delay into that phase (fixed seed), it sends SIGKILL, restarts ``amaris serve``
with the same configuration and, once it answers, checks through the API that every
rollout acknowledged so far is in its step's log (``GET /steps/{n}/rollouts``) and
counts the rubric versions the updater made per step (``GET /rubrics/history``).

Usage::

    .venv/bin/python -m bench.probes.kill_trial [--kills 20] [--seed 11] [--write] [--smoke]

Prints a report; ``--write`` replaces the ``kill_trial`` section of docs/benchmarks.md.
``--smoke``: one kill of each kind, steps of 4 rollouts from 2 clients, LLM calls of 0 ms.
"""

from __future__ import annotations

import argparse
import collections
import random
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import yaml

from amaris.app.prefect_server import PrefectServer
from amaris.app.running import free_port
from amaris.models import ScoreRequest
from amaris.sim.policy import Policy
from bench._common import (
    ROOT,
    Child,
    amaris_executable,
    child_env,
    doc_section,
    loadavg,
    markers,
    raise_interrupt,
    start_offline_llm,
    wait_ready,
    work_folder,
    write_doc,
)

PHASES = ("scoring", "pipeline")
KINDS = ("scoring", "pipeline", "scoring", "published")
"""Kills in turn: at a random moment of scoring, of the pipeline, of scoring, and right
after the step's pipeline published its rubric version (before the step is done; a
random pipeline moment when the step publishes none)."""
FIRST_DURATION_S = {"scoring": 1.5, "pipeline": 1.5}
"""A kill lands uniformly within the phase's last duration (before one is known, this)."""
PHASE_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 60.0
SMOKE_KINDS = ("scoring", "pipeline", "published")
"""A smoke run's kills: one of each kind."""
SMOKE = {"kills": len(SMOKE_KINDS), "rollouts_per_step": 4, "clients": 2, "latency_ms": 0.0}


@dataclass
class Driver:
    """The simulated trainer, in a thread; what it sent and what was acknowledged."""

    url: str
    per_step: int
    clients: int
    seed: int
    up: threading.Event
    phase: str = "starting"
    step: int = 0
    phase_started: float = 0.0
    entries: int = 0
    durations: dict[str, float] = field(default_factory=dict)
    """The last duration of each phase, uninterrupted."""
    """Phases entered so far: a kill waits for a phase entered after the previous kill."""
    acked: dict[int, set[str]] = field(default_factory=lambda: collections.defaultdict(set))
    sent: int = 0
    retried: int = 0
    steps_done: int = 0
    outcomes: dict[int, str] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    changed: threading.Condition = field(default_factory=threading.Condition)
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    _clean: int = 0
    """``entries`` while no kill has cut the current phase."""

    def killed(self) -> None:
        """A kill cut the current phase: its duration is not a phase's duration."""
        with self.changed:
            self._clean = -1

    def _enter(self, phase: str) -> None:
        with self.changed:
            now = time.monotonic()
            if self.phase in PHASES and self.entries == self._clean:
                self.durations[self.phase] = now - self.phase_started
            self.phase, self.phase_started, self._clean = phase, now, self.entries + 1
            self.entries += 1
            self.changed.notify_all()

    def _call(self, client: httpx2.Client, method: str, path: str, **kwargs: Any) -> Any:
        """One request, sent again after each connection error once the server is back."""
        while not self.stop.is_set():
            self.up.wait()
            try:
                response = client.request(method, f"{self.url}{path}", **kwargs)
            except httpx2.TransportError:
                with self.lock:
                    self.retried += 1
                self.up.wait()  # cleared by the killer before the kill: back after restart
                continue
            if response.status_code in (429, 503):  # busy, or a long poll cut by a shutdown
                time.sleep(0.2)
                continue
            return response
        return None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.stop.set()
            self._enter("failed")

    def _run(self) -> None:
        policy = Policy(self.seed, self.per_step, total_steps=1000, learning_rate=0.5)
        local = threading.local()

        def client() -> httpx2.Client:
            if not hasattr(local, "client"):
                local.client = httpx2.Client(timeout=REQUEST_TIMEOUT_S, trust_env=False)
            made: httpx2.Client = local.client
            return made

        with (
            ThreadPoolExecutor(self.clients) as pool,
            httpx2.Client(timeout=REQUEST_TIMEOUT_S + 200, trust_env=False) as control,
        ):
            while not self.stop.is_set():
                step = self.step
                rubric = self._call(control, "GET", "/rubrics")
                if rubric is None:
                    return
                planned = policy.rollouts(step, rubric.json())
                self._enter("scoring")

                def send(item: Any, step: int = step) -> None:
                    request = ScoreRequest(rollout=item.rollout, metadata=item.metadata)
                    body = request.model_dump(mode="json", exclude_unset=True)
                    response = self._call(client(), "POST", "/score", json=body)
                    with self.lock:
                        self.sent += 1
                    if (
                        response is not None
                        and response.is_success
                        and response.json().get("status") in ("scored", "unscored")
                    ):
                        with self.lock:
                            self.acked[step].add(item.rollout.id)

                list(pool.map(send, planned))
                if self.stop.is_set():
                    return
                self._enter("pipeline")
                done = self._call(control, "POST", "/complete", json={"step": step})
                if done is None:
                    return
                result = self._call(
                    control,
                    "GET",
                    "/rubric_status/wait",
                    params={"step": step, "timeout": PHASE_TIMEOUT_S},
                )
                if result is None:
                    return
                self.outcomes[step] = str(result.json().get("status"))
                self.steps_done += 1
                self.step += 1
                self._enter("between")

    def wait_for(self, phase: str, after: int) -> int:
        """Block until the driver is in ``phase``, entered after ``after`` entries; returns
        the entries then."""
        deadline = time.monotonic() + PHASE_TIMEOUT_S
        with self.changed:
            while self.phase != phase or self.entries <= after:
                if self.error is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"driver never reached {phase}: {self.error!r}")
                self.changed.wait(0.5)
            return self.entries


def version_published(url: str, driver: Driver, entries: int) -> bool:
    """Poll the rubric in force until the driver's step published a version (True) or its
    pipeline phase ended (False)."""
    step = driver.step
    with httpx2.Client(base_url=url, timeout=10, trust_env=False) as client:
        while driver.entries == entries:
            if client.get("/rubrics").json().get("step") == step:
                return True
            time.sleep(0.01)
    return False


def check(url: str, acked: dict[int, set[str]]) -> tuple[int, dict[int, int]]:
    """(acknowledged rollouts missing from their step's log, updater versions per step)."""
    lost = 0
    with httpx2.Client(base_url=url, timeout=REQUEST_TIMEOUT_S, trust_env=False) as client:
        for step, ids in sorted(acked.items()):
            response = client.get(f"/steps/{step}/rollouts")
            logged = (
                {r["rollout"]["id"] for r in response.json()["records"]}
                if response.status_code == 200
                else set()
            )
            lost += len(ids - logged)
        history = client.get("/rubrics/history").json()
    versions = collections.Counter(v["step"] for v in history if v["origin"] == "updater")
    return lost, dict(versions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--rollouts-per-step", type=int, default=48)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--latency-ms", type=float, default=150.0, help="the offline LLM's delay per call"
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep the files here")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--smoke", action="store_true", help="one kill of each kind, small steps")
    args = parser.parse_args(argv)
    if args.smoke and args.write:
        parser.error("--smoke: its figures do not go to docs/benchmarks.md")
    if args.smoke:
        vars(args).update(SMOKE)
    signal.signal(signal.SIGTERM, raise_interrupt)
    rng = random.Random(args.seed)
    exe, env = amaris_executable(), child_env()
    load, started = loadavg(), time.monotonic()
    trials: list[dict[str, Any]] = []
    with work_folder("amaris-kill-", args.keep) as workdir:
        llm, llm_url = start_offline_llm(exe, args.latency_ms, workdir, env)
        # One for every restart, unless child_env gives the smoke tests' shared one.
        prefect = None if "PREFECT_API_URL" in env else PrefectServer(workdir / "prefect-server")
        amaris: Child | None = None
        driver: Driver | None = None
        try:
            if prefect is not None:
                prefect.start()
            wait_ready(llm, f"{llm_url}/models", lambda r: bool(r.json().get("data")))
            if prefect is not None:
                prefect.wait_ready()
                env.update(prefect.client_env())  # its address and auth string
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            config = workdir / "config.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "server": {"host": "127.0.0.1", "port": port},
                        # The offline judge on 127.0.0.1 stands for a hosted one: no per-endpoint
                        # limit (a judge on this machine gets 4 in flight by default).
                        "client": {
                            "default": {
                                "base_url": llm_url,
                                "api_key": "offline",
                                "max_concurrency": 0,
                            }
                        },
                        "memory": {"path": str(workdir / "data"), "embedding_model": "hashing"},
                        # One criterion per update: more steps publish a version (the offline
                        # updater adds a pitfall per unpenalised hacking behaviour).
                        "pipeline": {"rollouts_per_step": None, "max_modifications": 1},
                        "prefect": {"repair_interval_seconds": None},
                        "logging": {"level": "WARNING"},
                    }
                ),
                encoding="utf-8",
            )

            def start() -> Child:
                child = Child(
                    "amaris",
                    [exe, "serve", "--config", str(config)],
                    workdir / "amaris.log",
                    workdir,
                    env,
                )
                wait_ready(child, f"{url}/healthz", lambda r: r.status_code == 200)
                return child

            amaris = start()
            up = threading.Event()
            up.set()
            driver = Driver(url, args.rollouts_per_step, args.clients, args.seed, up)
            thread = threading.Thread(target=driver.run, name="driver", daemon=True)
            thread.start()
            entries = 0
            kinds = SMOKE_KINDS if args.smoke else KINDS
            for n in range(args.kills):
                kind = kinds[n % len(kinds)]
                phase = "pipeline" if kind == "published" else kind
                entries = driver.wait_for(phase, entries)
                delay = rng.uniform(0, driver.durations.get(phase, FIRST_DURATION_S[phase]))
                if kind == "published" and version_published(url, driver, entries):
                    delay = time.monotonic() - driver.phase_started
                else:
                    if kind == "published":  # none: a random moment of the next pipeline
                        entries = driver.wait_for(phase, driver.entries)
                    time.sleep(max(0.0, driver.phase_started + delay - time.monotonic()))
                    kind = phase
                seen, step = driver.phase, driver.step
                if seen == "pipeline" and kind == "published":
                    seen = "published"
                up.clear()
                driver.killed()
                amaris.popen.send_signal(signal.SIGKILL)
                amaris.popen.wait(30)
                killed_at = time.monotonic()
                amaris = start()
                restart_s = time.monotonic() - killed_at
                with driver.lock:
                    acked = {s: set(ids) for s, ids in driver.acked.items()}
                lost, versions = check(url, acked)
                up.set()
                trial = {
                    "n": n + 1,
                    "aimed": phase,
                    "phase": seen,
                    "step": step,
                    "delay_s": delay,
                    "restart_s": restart_s,
                    "acked": sum(len(ids) for ids in acked.values()),
                    "lost": lost,
                    "max_versions": max(versions.values(), default=0),
                }
                trials.append(trial)
                print(
                    f"kill {n + 1:2d}: {seen:8s} step {step:2d} +{delay:.2f} s; restarted in "
                    f"{restart_s:.1f} s; {trial['acked']} acknowledged, {lost} lost; "
                    f"max versions per step {trial['max_versions']}",
                    flush=True,
                )
            # The step running at the last kill resumes; let the driver finish it.
            current = driver.step
            deadline = time.monotonic() + PHASE_TIMEOUT_S
            while driver.step <= current and driver.error is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("the last step did not finish after the restart")
                time.sleep(0.2)
            driver.stop.set()
            up.set()
            thread.join(REQUEST_TIMEOUT_S)
            if driver.error is not None:
                raise RuntimeError(f"driver failed: {driver.error!r}")
            with driver.lock:
                acked = {s: set(ids) for s, ids in driver.acked.items()}
            lost, versions = check(url, acked)
            with httpx2.Client(base_url=url, timeout=30, trust_env=False) as client:
                statuses = collections.Counter(s["status"] for s in client.get("/steps").json())
        finally:
            if driver is not None:
                driver.stop.set()
            if amaris is not None:
                amaris.stop()
            if prefect is not None:
                prefect.stop()
            llm.stop()
    text = report(args, trials, lost, versions, driver, statuses, load, time.monotonic() - started)
    print(kills_table(trials, versions))
    print(text)
    if args.write:
        write_doc(ROOT / "docs" / "benchmarks.md", text, *markers("kill_trial"))
    return 0 if lost == 0 and max(versions.values(), default=0) <= 1 else 1


def report(
    args: argparse.Namespace,
    trials: list[dict[str, Any]],
    lost: int,
    versions: dict[int, int],
    driver: Driver | None,
    statuses: collections.Counter[str],
    load: str,
    took: float,
) -> str:
    assert driver is not None
    phases = collections.Counter(t["phase"] for t in trials)
    restarts = sorted(t["restart_s"] for t in trials) or [float("nan")]
    acked = sum(len(ids) for ids in driver.acked.values())
    worst = max((t["lost"] for t in trials), default=0)
    kills = ", ".join(f"{k}: {v}" for k, v in sorted(phases.items()))
    registry = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
    rows = [
        ("kills (phase at the kill)", f"{len(trials)} ({kills})", str(args.kills)),
        ("steps completed (step registry)", f"{driver.steps_done} ({registry})", ""),
        ("rollouts sent (retries included) / acknowledged", f"{driver.sent} / {acked}", ""),
        (
            "acknowledged rollouts lost: worst check after a restart / at the end",
            f"{worst} / {lost}",
            "0",
        ),
        (
            "rubric versions per step, max (steps with a version)",
            f"{max(versions.values(), default=0)} ({len(versions)})",
            "≤ 1",
        ),
        (
            "restart until `/healthz` answers, median / max (s)",
            f"{restarts[len(restarts) // 2]:.1f} / {restarts[-1]:.1f}",
            "",
        ),
    ]
    table = [
        "| figure | value | goal |",
        "|---|---|---|",
        *(f"| {name} | {value} | {goal} |" for name, value, goal in rows),
    ]
    return doc_section(
        "kill_trial",
        "Kill trials: `kill -9` of `amaris serve`, restart, count the losses",
        f"A driver plays a trainer ({args.rollouts_per_step} rollouts a step from "
        f"{args.clients} clients, retrying after a connection error) while `amaris serve` "
        "gets SIGKILL during scoring, during the step's pipeline or right after a step "
        "published its rubric version (`published`), and is restarted on the same data "
        "folder; every acknowledged rollout is then looked up through the API. "
        f"Took {took / 60:.1f} min.",
        "\n".join(table),
        script=__file__,
        load=f"{load} -> {loadavg()}",
    )


def kills_table(trials: list[dict[str, Any]], versions: dict[int, int]) -> str:
    """One row per kill (printed, not on the page)."""
    return "\n".join(
        [
            "| kill | phase | step | into the phase (s) | acknowledged so far | lost | "
            "step made a version |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {t['n']} | {t['phase']} | {t['step']} | {t['delay_s']:.2f} | {t['acked']} | "
                f"{t['lost']} | {'yes' if versions.get(t['step']) else 'no'} |"
                for t in trials
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
