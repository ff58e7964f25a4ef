"""``amaris bootstrap``: an initial adaptive rubric from ranked examples
(:mod:`amaris.bootstrap`), published as a rubric version with origin ``bootstrap``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from amaris.agents.prompts import load_prompts
from amaris.bootstrap.data import Dataset, DatasetError, Pair, load_dataset
from amaris.bootstrap.report import write_report
from amaris.bootstrap.run import BootstrapError, Options, Result, bootstrap
from amaris.cli.common import CommandError
from amaris.cli.config import load
from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, build_providers
from amaris.manifest import build_manifest, write_manifest
from amaris.memory.qdrant import StoreLockedError, open_qdrant
from amaris.redact import redact_url
from amaris.rubric.model import anchors_from_config
from amaris.rubric.store import RubricStore
from amaris.scoring.scorer import Scorer
from amaris.settings import Settings


def judge_name(settings: Settings) -> str:
    """The scorer as the report names it: offline, or its model and endpoint (no secret)."""
    if "scorer" in settings.client.offline_agents():
        return "offline rule-based judge (no LLM)"
    base = settings.client.for_agent("scorer").base_url
    model = settings.agents.for_agent("scorer").model
    return f"{model} at {redact_url(base) if base else 'OpenAI'}"


async def _run(
    settings: Settings,
    store: RubricStore,
    data: tuple[Dataset, dict[str, list[Pair]]],
    args: argparse.Namespace,
) -> Result:
    dataset, pairs = data
    gateway = LLMGateway(settings, build_providers(settings), CallLog(settings.log_dir))
    judge = settings.agents.for_agent("scorer")
    scorer = Scorer(
        settings.scoring,
        gateway,
        store,
        load_prompts(settings.prompts)["scorer"],
        samples=judge.samples,
        logprobs=judge.logprobs,
    )
    options = Options(
        seed=args.seed,
        generations=args.generations,
        population=args.population,
        holdout=args.holdout,
    )
    try:
        return await bootstrap(settings, dataset, pairs, gateway, scorer, options)
    finally:
        await gateway.close()


class BootstrapRecord(BaseModel):
    """What a bootstrap run's manifest records of it (its ``extra``): its arguments."""

    model_config = ConfigDict(strict=True)

    data: str
    """The data file, resolved."""
    generations: int
    population: int
    holdout: float
    dry_run: bool


def run_bootstrap(args: argparse.Namespace) -> int:
    """Propose, search, publish (unless ``--dry-run``) and write the report folder, with the
    run manifest (``<out>/manifest.json``, and in the data folder when a version is
    published)."""
    settings = load(args)
    try:
        data = load_dataset(args.data)
    except DatasetError as exc:
        raise CommandError(str(exc), 2) from exc
    manifest = build_manifest(
        settings,
        load_prompts(settings.prompts),
        "bootstrap",
        seed=args.seed,
        extra=BootstrapRecord(
            data=str(Path(args.data).resolve()),
            generations=args.generations,
            population=args.population,
            holdout=args.holdout,
            dry_run=args.dry_run,
        ),
    )
    try:
        client = open_qdrant(settings.memory, location=":memory:" if args.dry_run else None)
    except StoreLockedError as exc:
        raise CommandError(f"{exc}; stop the server before `amaris bootstrap`", 1) from exc
    try:
        store = RubricStore(
            client,
            settings.memory.collection,
            None if args.dry_run else settings.memory.rubrics_export_path,
        )
        try:
            result = asyncio.run(_run(settings, store, data, args))
        except BootstrapError as exc:
            raise CommandError(f"bootstrap: {exc}", 1) from exc
        version = None
        if not args.dry_run:
            # Ids the scope held before are not reused: the report shows those published.
            adaptive, next_id = store.renumbered(result.adaptive)
            result = dataclasses.replace(result, adaptive=adaptive)
            version = store.publish(
                anchors=anchors_from_config(settings.anchor_rubrics),
                adaptive=adaptive,
                origin="bootstrap",
                step=None,
                next_adaptive_id=next_id,
            ).version
    finally:
        client.close()
    report = write_report(args.out, result, str(args.data), judge_name(settings), version)
    manifest["extra"]["rubric_version"] = version
    write_manifest(manifest, args.out, "manifest.json")
    if version is not None:
        write_manifest(manifest, settings.memory.path)
    chosen, initial = result.accuracy["bootstrap"]["all"], result.accuracy["initial"]["all"]
    print(
        f"pairwise accuracy {chosen.accuracy:.3f} (initial rubric {initial.accuracy:.3f}); "
        f"top tail {chosen.top_accuracy:.3f} (initial {initial.top_accuracy:.3f}); "
        + (f"rubric version {version} published" if version else "nothing published")
        + f"; report: {report}",
        file=sys.stderr,
    )
    return 0
