"""``amaris simulate``, ``amaris replay`` and ``amaris export``.

``simulate`` and ``replay`` share one code path: a :class:`~amaris.sim.driver.StepSource`
(the drifting policy, or recorded rollouts) driven through a server by
:func:`amaris.sim.driver.run`, then :func:`amaris.sim.report.write_report`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import yaml

from amaris.agents.prompts import load_prompts
from amaris.cli.inspect import CommandError, api_get, server_url
from amaris.manifest import ManifestError, build_manifest, read_manifest, write_manifest
from amaris.memory.qdrant import StoreLockedError, open_qdrant
from amaris.redact import redact_url
from amaris.settings import ConfigError, Settings, load_settings, secret_value
from amaris.sim.driver import RunResult, StepResult, run
from amaris.sim.judge_calls import judge_calls
from amaris.sim.metrics import memory_outcomes
from amaris.sim.policy import PlannedRollout, Policy
from amaris.sim.progress import Progress
from amaris.sim.records import RecordedRollout, RecordsError, local_records, read_recorded
from amaris.sim.report import write_report
from amaris.sim.server import managed_server, shared_prefect

MODES: dict[str, tuple[bool, bool]] = {
    "none": (False, False),
    "static": (True, False),
    "dynamic": (False, True),
    "both": (True, True),
}
"""Memory modes of the ablation: (static memory on, dynamic memory on)."""
DEFAULT_STATIC_STEPS = 5
DEFAULT_DYNAMIC_LIMIT = 3


def config_path(args: argparse.Namespace) -> Path | None:
    """The configuration file the command reads (``--config``, else ``./config.yaml``)."""
    path: Path | None = args.config
    if path is None and Path("config.yaml").is_file():
        path = Path("config.yaml")
    return path


# -- export ----------------------------------------------------------------------------------
def api_records(settings: Settings, url: str | None) -> list[dict[str, Any]]:
    """Every rollout-log record, step by step, through a running server's API."""
    records: list[dict[str, Any]] = []
    for entry in api_get(settings, url, "/steps"):
        records += api_get(settings, url, f"/steps/{entry['step']}/rollouts")["records"]
    return records


def export(settings: Settings, args: argparse.Namespace) -> int:
    """Write the rollout log as JSONL (one record a line, by step then arrival)."""

    try:
        client = open_qdrant(settings.memory)
    except StoreLockedError:
        records = api_records(settings, args.url)
    else:
        try:
            records = list(local_records(client, settings))
        finally:
            client.close()
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if str(args.out) == "-":
        sys.stdout.write(lines)
    else:
        try:
            Path(args.out).write_text(lines, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"--out {args.out}: {exc.strerror or exc}") from exc
        steps = len({r["step"] for r in records})
        print(f"{len(records)} rollouts of {steps} steps written to {args.out}", file=sys.stderr)
    return 0


# -- simulate --------------------------------------------------------------------------------
class SimulatedSource:
    """The drifting policy as a step source."""

    def __init__(self, policy: Policy, steps: int, first: int = 0) -> None:
        self.policy = policy
        self._steps = range(first, first + steps)

    def steps(self) -> Sequence[int]:
        return self._steps

    def rollouts(self, step: int, rubric: Mapping[str, Any]) -> list[PlannedRollout]:
        return self.policy.rollouts(step, rubric)

    def observe(self, result: StepResult) -> None:
        by_behaviour: dict[str, list[float]] = {}
        for r in result.rollouts:
            if r.reward is not None:
                by_behaviour.setdefault(r.behaviour, []).append(r.reward)
        self.policy.observe({b: sum(v) / len(v) for b, v in by_behaviour.items()})


@contextmanager
def _server(
    args: argparse.Namespace,
    settings: Settings,
    stack: ExitStack,
    overrides: Mapping[str, Any] | None = None,
    prefect_env: Mapping[str, str] | None = None,
) -> Iterator[tuple[str, str | None]]:
    """(URL, bearer key): ``--url`` as given, else an ``amaris serve`` started here."""

    if getattr(args, "url", None):
        yield server_url(settings, args.url), secret_value(settings.server.api_key)
        return
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="amaris-sim-")))
    with managed_server(config_path(args), folder, overrides, prefect_env) as url:
        yield url, secret_value(settings.server.api_key)


def record_run(
    settings: Settings, kind: str, out: Path, seed: int | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """Write the run manifest in the data folder and as ``<out>/manifest.json``."""
    manifest = build_manifest(
        settings, load_prompts(settings.prompts), kind, seed=seed, extra=extra
    )
    path = write_manifest(manifest, settings.memory.path)
    write_manifest(manifest, out, "manifest.json")
    print(f"run manifest: {path} (config {manifest['config_hash']})", file=sys.stderr)
    return manifest


def _simulated_run(
    settings: Settings, args: argparse.Namespace, url: str, key: str | None, label: str
) -> tuple[RunResult, Policy, SimulatedSource]:
    """One simulation through the server at ``url``, from its first free step."""
    # A server given by --url may hold steps already: continue after them.
    first = 1 + max((int(s["step"]) for s in api_get(settings, url, "/steps")), default=-1)
    policy = Policy(
        args.seed,
        args.rollouts_per_step,
        first + args.steps,
        args.learning_rate,
        group_size=args.group_size,
    )
    source = SimulatedSource(policy, args.steps, first)
    print(
        f"amaris simulate ({label}): {args.steps} steps x {args.rollouts_per_step} rollouts "
        f"from step {first}, seed {args.seed}, server {redact_url(url)}",
        file=sys.stderr,
    )
    progress = Progress(args.steps, f"simulate {label}")
    result = asyncio.run(run(url, source, label=label, api_key=key, progress=progress))
    return result, policy, source


def _setup(args: argparse.Namespace) -> str:
    return (
        f"{args.steps} steps x {args.rollouts_per_step} rollouts (groups of {args.group_size} "
        f"per prompt), seed {args.seed}, learning rate {args.learning_rate:g}"
    )


def _extra(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed": args.seed,
        "steps": args.steps,
        "rollouts_per_step": args.rollouts_per_step,
        "group_size": args.group_size,
        "learning_rate": args.learning_rate,
    }


def simulate(settings: Settings, args: argparse.Namespace) -> int:
    """Run the simulated training loop and write the report folder (with ``--ablation``,
    once per memory mode, and ``ablation.json``)."""
    if getattr(args, "ablation", False):
        return simulate_ablation(settings, args)
    record_run(
        settings,
        "simulate",
        args.out,
        args.seed,
        {
            **_extra(args),
            "url": redact_url(args.url) if args.url else None,
            "rollouts": str((args.out / "rollouts.jsonl").resolve()),
        },
    )
    with ExitStack() as stack, _server(args, settings, stack) as (url, key):
        result, policy, source = _simulated_run(settings, args, url, key, "simulate")
        records = [r for r in api_records(settings, url) if r["step"] in source.steps()]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rollouts.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8"
    )
    intro = [
        f"{_setup(args)}; wall time {result.wall_s:.1f} s. Behaviours and how to "
        "read this page: docs/simulation.md. The run's rollout log is in rollouts.jsonl "
        "(`amaris replay rollouts.jsonl` re-runs it under each memory mode).",
    ]
    extra = {**_extra(args), "mixes": policy.mixes, "judge_calls": judge_calls(records)}
    report = write_report(args.out, [result], "amaris simulate", intro, extra, settings.pricing)
    print(f"report: {report} (and report.html, metrics.json)", file=sys.stderr)
    return 0


def simulate_ablation(settings: Settings, args: argparse.Namespace) -> int:
    """The same simulation (seed, policy) once per memory mode, each against a fresh server
    and memory: the report compares them, ``ablation.json`` holds each mode's
    :func:`~amaris.sim.metrics.memory_outcomes`."""
    if getattr(args, "url", None):
        raise CommandError("--ablation starts a fresh server per memory mode: drop --url")
    record_run(
        settings, "simulate-ablation", args.out, args.seed, {**_extra(args), "modes": list(MODES)}
    )
    results: list[RunResult] = []
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="amaris-abl-")))
        prefect_env = stack.enter_context(shared_prefect(folder))
        for mode in MODES:
            overrides = mode_overrides(settings, mode)
            with (
                ExitStack() as inner,
                _server(args, settings, inner, overrides, prefect_env) as (url, key),
            ):
                result, _, _ = _simulated_run(settings, args, url, key, mode)
            result.memory = {k.removeprefix("memory."): v for k, v in overrides.items()}
            results.append(result)
    intro = [
        f"Memory ablation: the same simulation ({_setup(args)}) once per memory mode, each "
        "against a fresh server and memory. What the modes and figures mean: "
        "docs/simulation.md; the figures are in ablation.json too.",
    ]
    extra = {**_extra(args), "modes": list(MODES)}
    report = write_report(
        args.out, results, "amaris simulate: memory ablation", intro, extra, settings.pricing
    )
    outcomes = {r.label: memory_outcomes(r) for r in results}
    (args.out / "ablation.json").write_text(json.dumps(outcomes, indent=2) + "\n", encoding="utf-8")
    print(f"report: {report} (and report.html, metrics.json, ablation.json)", file=sys.stderr)
    return 0


# -- replay ----------------------------------------------------------------------------------
class ReplaySource:
    """Recorded rollouts as a step source: the same rollouts, re-scored step by step."""

    def __init__(self, records: Sequence[RecordedRollout]) -> None:
        self._by_step: dict[int, list[RecordedRollout]] = {}
        for record in records:
            self._by_step.setdefault(record.step, []).append(record)

    def steps(self) -> Sequence[int]:
        return sorted(self._by_step)

    def rollouts(self, step: int, rubric: Mapping[str, Any]) -> list[PlannedRollout]:
        return [
            PlannedRollout(
                r.rollout.model_dump(mode="json", exclude_none=True),
                {**r.metadata, "current_step": step},
                r.behaviour,
            )
            for r in self._by_step[step]
        ]

    def observe(self, result: StepResult) -> None:
        """A replay does not learn."""


def mode_overrides(settings: Settings, mode: str) -> dict[str, int]:
    """The memory settings of ``mode``: on = the configured value (or the default)."""
    static, dynamic = MODES[mode]
    memory = settings.memory
    return {
        "memory.static_memory_steps": (memory.static_memory_steps or DEFAULT_STATIC_STEPS)
        if static
        else 0,
        "memory.dynamic_memory_limit_per_query": (
            memory.dynamic_memory_limit_per_query or DEFAULT_DYNAMIC_LIMIT
        )
        if dynamic
        else 0,
    }


def from_manifest(args: argparse.Namespace, folder: Path) -> tuple[Settings, dict[str, Any]]:
    """``--manifest``: its configuration (written to ``folder``, read as ``--config``) and
    what the replay's own manifest records of it; ROLLOUTS defaults to the run's rollouts.

    Raises:
        CommandError: the manifest cannot be read or its configuration is invalid.
    """
    try:
        source = read_manifest(args.manifest)
    except ManifestError as exc:
        raise CommandError(str(exc), 2) from exc
    path = folder / "manifest-config.yaml"
    path.write_text(yaml.safe_dump(source["config"], sort_keys=False), encoding="utf-8")
    try:
        settings = load_settings(path)
    except ConfigError as exc:
        raise CommandError(f"--manifest {args.manifest}: {exc}", 2) from exc
    args.config = path
    if args.rollouts is None:
        recorded = (source.get("extra") or {}).get("rollouts")
        if not recorded:
            raise CommandError(
                f"--manifest {args.manifest} names no rollouts file: give ROLLOUTS.jsonl", 2
            )
        args.rollouts = Path(recorded)
    return settings, {
        "manifest": str(args.manifest),
        "run_id": source.get("run_id"),
        "config_hash": source.get("config_hash"),
        "seed": source.get("seed"),
    }


def replay(settings: Settings, args: argparse.Namespace) -> int:
    """Re-run the evolution over recorded rollouts under each memory mode; one report."""

    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="amaris-replay-")))
        origin: dict[str, Any] = {}
        if args.manifest is not None:
            settings, origin = from_manifest(args, folder)
        if args.rollouts is None:
            raise CommandError("ROLLOUTS.jsonl (or --manifest of a simulate run) is needed", 2)
        try:
            records = read_recorded(args.rollouts)
        except RecordsError as exc:
            raise CommandError(f"ROLLOUTS: {exc}") from exc
        record_run(
            settings,
            "replay",
            args.out,
            origin.get("seed"),
            {"rollouts": str(args.rollouts), "modes": list(args.modes), "source": origin},
        )
        source = ReplaySource(records)
        results: list[RunResult] = []
        prefect_env = stack.enter_context(shared_prefect(folder))
        for mode in args.modes:
            overrides = mode_overrides(settings, mode)
            with (
                ExitStack() as inner,
                _server(args, settings, inner, overrides, prefect_env) as (url, key),
            ):
                progress = Progress(len(source.steps()), f"replay {mode}")
                result = asyncio.run(run(url, source, label=mode, api_key=key, progress=progress))
            result.memory = {k.removeprefix("memory."): v for k, v in overrides.items()}
            results.append(result)
    intro = [
        f"{len(records)} recorded rollouts of {len(source.steps())} steps from "
        f"{args.rollouts}, re-scored step by step under the rubric each memory mode evolves "
        "(a fresh data folder per mode). What the modes mean: docs/simulation.md.",
    ]
    extra = {"source": str(args.rollouts), "modes": list(args.modes)}
    report = write_report(
        args.out, results, "amaris replay: memory ablation", intro, extra, settings.pricing
    )
    print(f"report: {report} (and report.html, metrics.json)", file=sys.stderr)
    return 0
