"""``amaris simulate``: a simulated RL training loop against amaris, and what the
simulator's commands share (``replay``, ``export``).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from pydantic import BaseModel

from amaris.agents.prompts import load_prompts
from amaris.cli.commands.simulate import MODES, sized
from amaris.cli.common import CommandError, config_path
from amaris.cli.config import load, server_url
from amaris.cli.reported import reported
from amaris.cli.store import api_get, api_records
from amaris.manifest import build_manifest, write_manifest
from amaris.redact import redact_url
from amaris.settings import Settings, secret_value
from amaris.sim.agent_hack import (
    hack_outcome,
    hack_report,
    plot_behaviours,
    report_blocks,
    scenario_settings,
)
from amaris.sim.agent_policy import AgentPolicy, AgentSource
from amaris.sim.answers import RubricJSON
from amaris.sim.cascade import CASCADE_STORY, CheapJudge, cascade_outcome, cascade_overrides
from amaris.sim.drift import (
    HACKED,
    LENIENT_TO,
    DriftingJudge,
    DriftSource,
    scenario_overrides,
    serve_judge,
)
from amaris.sim.driver import RunResult, StepResult, StepSource, run
from amaris.sim.fidelity import fidelity_outcome
from amaris.sim.judge_calls import judge_calls
from amaris.sim.metrics import memory_outcomes
from amaris.sim.noisy_judge import NoisyJudge
from amaris.sim.policy import PlannedRollout, Policy
from amaris.sim.progress import Progress
from amaris.sim.report import write_report
from amaris.sim.server import ConfigValue, managed_server, shared_prefect

DEFAULT_STATIC_STEPS = 5
DEFAULT_DYNAMIC_LIMIT = 3


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


@contextmanager
def served(
    settings: Settings,
    url: str | None,
    config: Path | None,
    overrides: Mapping[str, ConfigValue] | None = None,
    prefect_env: Mapping[str, str] | None = None,
) -> Iterator[tuple[str, str | None]]:
    """(URL, bearer key): ``url`` (``--url``) as given, else that of an ``amaris serve``
    started here on ``config`` with ``overrides``, in a data folder of its own."""
    key = secret_value(settings.server.api_key)
    if url:
        yield server_url(settings, url), key
        return
    with (
        tempfile.TemporaryDirectory(prefix="amaris-sim-") as folder,
        managed_server(config, Path(folder), overrides, prefect_env) as started,
    ):
        yield started, key


def record_run(
    settings: Settings,
    kind: str,
    out: Path,
    seed: int | None,
    extra: BaseModel,
) -> None:
    """Write the run manifest in the data folder and as ``<out>/manifest.json``; ``extra``:
    the run's own record (its arguments, its source), the manifest's ``extra``: the fields
    set (a record's model leaves out a field it was not given)."""
    prompts = load_prompts(settings.prompts)
    manifest = build_manifest(settings, prompts, kind, seed=seed, extra=extra)
    path = write_manifest(manifest, settings.memory.path)
    write_manifest(manifest, out, "manifest.json")
    print(f"run manifest: {path} (config {manifest['config_hash']})", file=sys.stderr)


class SimulatedSource:
    """The drifting policy as a step source."""

    def __init__(self, policy: Policy, steps: int, first: int = 0) -> None:
        self.policy = policy
        self._steps = range(first, first + steps)

    def steps(self) -> Sequence[int]:
        return self._steps

    def rollouts(self, step: int, rubric: RubricJSON) -> list[PlannedRollout]:
        return self.policy.rollouts(step, rubric)

    def observe(self, result: StepResult) -> None:
        by_behaviour: dict[str, list[float]] = {}
        for r in result.rollouts:
            if r.reward is not None:
                by_behaviour.setdefault(r.behaviour, []).append(r.reward)
        self.policy.observe({b: sum(v) / len(v) for b, v in by_behaviour.items()})


class Setup(BaseModel):
    """A simulation's arguments, as its manifest and report record them."""

    seed: int
    steps: int
    rollouts_per_step: int
    group_size: int
    learning_rate: float

    @classmethod
    def of(cls, args: argparse.Namespace) -> Setup:
        return cls(
            seed=args.seed,
            steps=args.steps,
            rollouts_per_step=args.rollouts_per_step,
            group_size=args.group_size,
            learning_rate=args.learning_rate,
        )

    def describe(self) -> str:
        return (
            f"{self.steps} steps x {self.rollouts_per_step} rollouts (groups of "
            f"{self.group_size} per prompt), seed {self.seed}, learning rate "
            f"{self.learning_rate:g}"
        )


class SimulateRecord(Setup):
    """What a simulation's manifest records of it (``extra``)."""

    url: str | None
    """The server simulated against (``--url``, redacted), None: one started for it."""
    rollouts: str
    """The run's rollouts file (``rollouts.jsonl``), for ``amaris replay --manifest``."""


class AblationRecord(Setup):
    """What an ablation's manifest records of it."""

    modes: list[str]


class ScenarioRecord(Setup):
    """What a scenario's manifest records of it."""

    scenario: str
    drift_step: int | None
    auditor_noise: float


def ports(args: argparse.Namespace) -> dict[str, ConfigValue]:
    """The ports ``--port`` and ``--prefect-port`` choose for the server a run starts."""
    chosen = {"server.port": args.port, "prefect.port": args.prefect_port}
    return {key: port for key, port in chosen.items() if port is not None}


def run_title(label: str) -> str:
    """How a run's lines name it: ``simulate``, or ``simulate <mode or scenario>``."""
    return label if label == "simulate" else f"simulate {label}"


def simulated_run(
    settings: Settings,
    args: argparse.Namespace,
    url: str,
    key: str | None,
    label: str,
    wrap: Callable[[SimulatedSource], StepSource] | None = None,
) -> tuple[RunResult, Policy, SimulatedSource]:
    """One simulation through the server at ``url``, from its first free step (its source
    as ``wrap`` makes it, when given)."""
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
    driven: StepSource = source if wrap is None else wrap(source)
    title = run_title(label)
    print(
        f"amaris {title}: {args.steps} steps x {args.rollouts_per_step} rollouts "
        f"from step {first}, seed {args.seed}, server {redact_url(url)}",
        file=sys.stderr,
    )
    progress = Progress(args.steps, title)
    result = asyncio.run(run(url, driven, label=label, api_key=key, progress=progress))
    return result, policy, source


def simulate(args: argparse.Namespace) -> int:
    """Run the simulated training loop and write the report folder (with ``--ablation``,
    once per memory mode, and ``ablation.json``)."""
    args = sized(args)
    with reported("simulate"):
        settings = load(args)
        if args.scenario:
            return simulate_scenario(settings, args)
        if args.ablation:
            return simulate_ablation(settings, args)
        return _simulate(settings, args)


def _simulate(settings: Settings, args: argparse.Namespace) -> int:
    setup = Setup.of(args)
    record_run(
        settings,
        "simulate",
        args.out,
        args.seed,
        SimulateRecord(
            **setup.model_dump(),
            url=redact_url(args.url) if args.url else None,
            rollouts=str((args.out / "rollouts.jsonl").resolve()),
        ),
    )
    with served(settings, args.url, config_path(args), ports(args)) as (url, key):
        result, policy, source = simulated_run(settings, args, url, key, "simulate")
        steps = source.steps()
        records = [r for r in api_records(settings, url) if r.step in steps]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rollouts.jsonl").write_text(
        "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in records),
        encoding="utf-8",
    )
    intro = [
        f"{setup.describe()}; wall time {result.wall_s:.1f} s. Behaviours and how to "
        "read this page: docs/simulation.md. The run's rollout log is in rollouts.jsonl "
        "(`amaris replay rollouts.jsonl` re-runs it under each memory mode).",
    ]
    extra = {**setup.model_dump(), "mixes": policy.mixes, "judge_calls": judge_calls(records)}
    report = write_report(args.out, [result], "amaris simulate", intro, extra, settings.pricing)
    print(f"report: {report} (and report.html, metrics.json)", file=sys.stderr)
    return 0


def simulate_ablation(settings: Settings, args: argparse.Namespace) -> int:
    """The same simulation (seed, policy) once per memory mode, each against a fresh server
    and memory: the report compares them, ``ablation.json`` holds each mode's
    :func:`~amaris.sim.metrics.memory_outcomes`."""
    if args.url:
        raise CommandError("--ablation starts a fresh server per memory mode: drop --url")
    setup = Setup.of(args)
    record_run(
        settings,
        "simulate-ablation",
        args.out,
        args.seed,
        AblationRecord(**setup.model_dump(), modes=list(MODES)),
    )
    results: list[RunResult] = []
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="amaris-abl-")))
        prefect_env = stack.enter_context(shared_prefect(folder, args.prefect_port))
        for mode in MODES:
            overrides = mode_overrides(settings, mode)
            chosen = {**overrides, **ports(args)}
            with served(settings, None, config_path(args), chosen, prefect_env) as (url, key):
                result, _, _ = simulated_run(settings, args, url, key, mode)
            result.memory = {k.removeprefix("memory."): v for k, v in overrides.items()}
            results.append(result)
    intro = [
        f"Memory ablation: the same simulation ({setup.describe()}) once per memory mode, "
        "each against a fresh server and memory. What the modes and figures mean: "
        "docs/simulation.md; the figures are in ablation.json too.",
    ]
    extra = {**setup.model_dump(), "modes": list(MODES)}
    report = write_report(
        args.out, results, "amaris simulate: memory ablation", intro, extra, settings.pricing
    )
    outcomes = {r.label: memory_outcomes(r) for r in results}
    (args.out / "ablation.json").write_text(json.dumps(outcomes, indent=2) + "\n", encoding="utf-8")
    print(f"report: {report} (and report.html, metrics.json, ablation.json)", file=sys.stderr)
    return 0


def simulate_scenario(settings: Settings, args: argparse.Namespace) -> int:
    """``--scenario``: the scorer served through the simulator's judge (lenient to padding
    from ``--drift-step`` in ``judge-drift``, never in ``steady`` and ``cascade``), audited
    by an honest but noisy judge (``--auditor-noise``); the report folder gets
    ``fidelity.json`` (docs/fidelity.md). ``cascade``: a cheap judge with logprobs before the
    simulator's, which audits too; ``cascade.json`` (docs/simulation.md)."""
    if args.scenario == "agent-hack":
        return simulate_agent_hack(settings, args)
    if args.url or args.ablation:
        raise CommandError(
            "--scenario starts its own server with the simulator's judge: drop --url and --ablation"
        )
    drift = args.drift_step if args.scenario == "judge-drift" else None
    if drift is not None and drift >= args.steps:
        raise CommandError(f"--drift-step {drift} must be below --steps {args.steps}")
    setup = Setup.of(args)
    cheap = CheapJudge(args.seed) if args.scenario == "cascade" else None
    record = ScenarioRecord(
        **setup.model_dump(),
        scenario=args.scenario,
        drift_step=drift,
        auditor_noise=0.0 if cheap else args.auditor_noise,
    )
    record_run(settings, "simulate", args.out, args.seed, record)
    judge = DriftingJudge()
    auditor = NoisyJudge(args.seed, args.auditor_noise)
    with (
        serve_judge(judge, args.judge_port) as judge_url,
        serve_judge(cheap or auditor, args.auditor_port) as second_url,
    ):
        plan = scenario_overrides if cheap is None else cascade_overrides
        overrides = {**plan(judge_url, second_url), **ports(args)}
        with served(settings, None, config_path(args), overrides) as (url, key):
            result, policy, source = simulated_run(
                settings, args, url, key, args.scenario, lambda s: DriftSource(s, judge, drift)
            )
            steps = source.steps()
            records = [r for r in api_records(settings, url) if r.step in steps] if cheap else []
    args.out.mkdir(parents=True, exist_ok=True)
    label, name = args.scenario, "cascade.json" if cheap else "fidelity.json"
    extra = {**record.model_dump(), "mixes": policy.mixes}
    if cheap is not None:
        figures = cascade_outcome(result, records, cheap).model_dump()
        extra["cascade"] = figures
        story = CASCADE_STORY
    else:
        figures = fidelity_outcome(result, drift, HACKED).model_dump()
        extra |= {
            "fidelity": figures,
            "lenient_verdicts": judge.lenient_verdicts,
            "auditor_verdicts": auditor.verdicts,
            "auditor_flipped": auditor.flipped,
        }
        where = f"lenient to {LENIENT_TO} from step {drift}" if drift is not None else "no drift"
        label += f" ({where})"
        story = (
            f"The training judge is the simulator's, the auditor the offline judge reading "
            f"{args.auditor_noise:.0%} of its verdicts the other way; fidelity.json holds the "
            "alarm's timing, its cost in judge calls and the reward gap between correct and "
            f"padded ({', '.join(HACKED)}) rollouts (docs/fidelity.md)."
        )
    (args.out / name).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    intro = [f"Scenario {label}: {setup.describe()}; wall time {result.wall_s:.1f} s. {story}"]
    title = f"amaris simulate: {args.scenario}"
    report = write_report(args.out, [result], title, intro, extra, settings.pricing)
    print(f"report: {report} (and report.html, metrics.json, {name})", file=sys.stderr)
    return 0


def simulate_agent_hack(settings: Settings, args: argparse.Namespace) -> int:
    """``--scenario agent-hack``: the coding agent (:mod:`amaris.sim.agent_policy`) against
    a fresh server whose anchor is a tests-pass verifier, every agent offline, memory on;
    with ``--ablation`` once more with memory off (one Prefect server shared). The report
    folder gets ``agent_hack.json`` and a plot per behaviour (docs/simulation.md)."""
    if args.url:
        raise CommandError("--scenario agent-hack starts its own servers: drop --url")
    setup = Setup.of(args)
    modes = {"memory-on": "both", "memory-off": "none"}
    record = ScenarioRecord(
        **setup.model_dump(), scenario=args.scenario, drift_step=None, auditor_noise=0.0
    )
    record_run(settings, "simulate", args.out, args.seed, record)
    results: list[RunResult] = []
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="amaris-agent-")))
        prefect_env = stack.enter_context(shared_prefect(folder, args.prefect_port))
        for label, mode in list(modes.items())[: 2 if args.ablation else 1]:
            memory = mode_overrides(settings, mode)
            overrides = {**scenario_settings(), **memory, **ports(args)}
            with served(settings, None, config_path(args), overrides, prefect_env) as (url, key):
                policy = AgentPolicy(
                    args.seed,
                    args.rollouts_per_step,
                    args.steps,
                    args.learning_rate,
                    args.group_size,
                )
                progress = Progress(args.steps, run_title(label))
                source = AgentSource(policy, args.steps)
                result = asyncio.run(run(url, source, label=label, api_key=key, progress=progress))
            result.memory = {k.removeprefix("memory."): v for k, v in memory.items()}
            results.append(result)
    report = hack_report(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "agent_hack.json").write_text(report.model_dump_json(indent=2) + "\n", "utf-8")
    images = plot_behaviours([(hack_outcome(r), r) for r in results], args.out)
    intro = [
        f"Scenario agent-hack: {setup.describe()}. A coding agent's trajectories, scored "
        "against a verifier that pays a final answer reporting that all tests pass; the "
        "agent learns to tamper with the tests at some step, drops it, and tries it again. "
        "agent_hack.json holds when tampering appeared, when the rubric first paid it less "
        "than an honest fix, and its share of the rollouts (docs/simulation.md).",
    ]
    extra = {**record.model_dump(), "agent_hack": report.model_dump(mode="json")}
    page = write_report(
        args.out,
        results,
        f"amaris simulate: {args.scenario}",
        intro,
        extra,
        settings.pricing,
        report_blocks(report, images),
    )
    print(f"report: {page} (and report.html, metrics.json, agent_hack.json)", file=sys.stderr)
    return 0
