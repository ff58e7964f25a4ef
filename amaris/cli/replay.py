"""``amaris replay``: the rubric evolution re-run over recorded rollouts under each memory
mode (the path of ``amaris simulate``, with recorded rollouts as the step source)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from amaris.cli.common import CommandError, config_path
from amaris.cli.config import load
from amaris.cli.reported import reported
from amaris.cli.simulate import mode_overrides, record_run, served
from amaris.manifest import ManifestError, read_manifest
from amaris.models import TrainingMetadata
from amaris.settings import ConfigError, Settings, load_settings
from amaris.sim.answers import RubricJSON
from amaris.sim.driver import RunResult, StepResult, run
from amaris.sim.policy import PlannedRollout
from amaris.sim.progress import Progress
from amaris.sim.records import RecordedRollout, RecordsError, read_recorded
from amaris.sim.report import write_report
from amaris.sim.server import shared_prefect


class ReplaySource:
    """Recorded rollouts as a step source: the same rollouts, re-scored step by step."""

    def __init__(self, records: Sequence[RecordedRollout]) -> None:
        self._by_step: dict[int, list[RecordedRollout]] = {}
        for record in records:
            self._by_step.setdefault(record.step, []).append(record)

    def steps(self) -> Sequence[int]:
        return sorted(self._by_step)

    def rollouts(self, step: int, rubric: RubricJSON) -> list[PlannedRollout]:
        """The step's recorded rollouts as their trainer sent them (``rubric`` unread)."""
        return [
            PlannedRollout(
                r.rollout,
                TrainingMetadata.model_validate({**r.metadata, "current_step": step}),
                r.behaviour,
            )
            for r in self._by_step[step]
        ]

    def observe(self, result: StepResult) -> None:
        """A replay does not learn."""


class ManifestOrigin(BaseModel):
    """The run ``--manifest`` describes, as the replay's own manifest records it: fields
    copied from the manifest file as they are (only ``config`` is checked); none are set
    without ``--manifest``."""

    model_config = ConfigDict(strict=True)  # copied, not converted

    manifest: str | None = None
    """The manifest file's path."""
    run_id: str | None = None
    config_hash: str | None = None
    seed: int | None = None


class ReplayRecord(BaseModel):
    """What a replay's manifest records of it (``extra``)."""

    rollouts: str
    modes: list[str]
    source: ManifestOrigin
    """The run ``--manifest`` named (its fields set: ``{}`` without one)."""


def from_manifest(args: argparse.Namespace, folder: Path) -> tuple[Settings, ManifestOrigin]:
    """``--manifest``: its configuration (written to ``folder``, read as ``--config``) and
    what the replay's own manifest records of it; ROLLOUTS defaults to the run's rollouts.

    Raises:
        CommandError: the manifest cannot be read or its configuration is invalid.
    """
    try:
        source = read_manifest(args.manifest)
    except ManifestError as exc:
        raise CommandError(str(exc), 2) from exc
    try:
        origin = ManifestOrigin(
            manifest=str(args.manifest),
            run_id=source.get("run_id"),
            config_hash=source.get("config_hash"),
            seed=source.get("seed"),
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        message = f"--manifest {args.manifest}: {error['loc'][0]}: {error['msg']}"
        raise CommandError(message, 2) from None
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
    return settings, origin


def replay(args: argparse.Namespace) -> int:
    """Re-run the evolution over recorded rollouts under each memory mode; one report."""
    with reported("replay"):
        return _replay(load(args), args)


def _replay(settings: Settings, args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="amaris-replay-")))
        origin = ManifestOrigin()
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
            origin.seed,
            ReplayRecord(rollouts=str(args.rollouts), modes=list(args.modes), source=origin),
        )
        source = ReplaySource(records)
        results: list[RunResult] = []
        prefect_env = stack.enter_context(shared_prefect(folder))
        for mode in args.modes:
            overrides = mode_overrides(settings, mode)
            with served(settings, None, config_path(args), overrides, prefect_env) as (url, key):
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
