"""``amaris rubrics show|init|history|diff``: the rubric store (:mod:`amaris.cli.store` says
how a command reads it while a server holds it)."""

from __future__ import annotations

import argparse
import sys

from pydantic import TypeAdapter
from qdrant_client import QdrantClient

from amaris.cli.config import load
from amaris.cli.store import output, read_store
from amaris.memory.qdrant import StoreLockedError, open_qdrant
from amaris.memory.rollout_log import StepRegistry
from amaris.models import CriterionPublic, RubricPublic
from amaris.rubric.diff import RubricDiff, diff_rubrics
from amaris.rubric.integrity import check_rubric_store
from amaris.rubric.store import RubricStore
from amaris.settings import Settings

RUBRIC = TypeAdapter(RubricPublic)
HISTORY = TypeAdapter(list[RubricPublic])
DIFF = TypeAdapter(RubricDiff)


def _rubric_store(client: QdrantClient, settings: Settings) -> RubricStore:
    return RubricStore(client, settings.memory.collection, settings.memory.rubrics_export_path)


def show(args: argparse.Namespace) -> int:
    """The version in force (version 1 is created from the configuration if none)."""
    settings = load(args)

    def local(client: QdrantClient) -> RubricPublic:
        return _rubric_store(client, settings).ensure_initialized(settings).public()

    rubric = read_store(settings, args.url, RUBRIC, local, "/rubrics")
    return output(False, RUBRIC, rubric, print_rubric)


def init(args: argparse.Namespace) -> int:
    """A new version from the configuration (the server stopped)."""
    settings = load(args)
    try:
        client = open_qdrant(settings.memory)
    except StoreLockedError as exc:
        print(f"{exc}; stop the server before `amaris rubrics init`.", file=sys.stderr)
        return 1
    try:
        prefix = settings.memory.collection
        store = RubricStore(client, prefix, settings.memory.rubrics_export_path)
        # A damaged store is restored (or refused) first: the new version's export must
        # not overwrite rubrics.json, the record of the versions the store lost.
        check_rubric_store(store, settings.memory.rubrics_export_path, StepRegistry(client, prefix))
        version = store.reset_from_config(settings)
        print(
            f"rubric version {version.version} created from the configuration "
            f"({len(version.anchors)} anchors, {len(version.adaptive)} adaptive)"
        )
        return 0
    finally:
        client.close()


def history(args: argparse.Namespace) -> int:
    """Every version, oldest first."""
    settings = load(args)

    def local(client: QdrantClient) -> list[RubricPublic]:
        return [v.public() for v in _rubric_store(client, settings).history()]

    versions = read_store(settings, args.url, HISTORY, local, "/rubrics/history")
    return output(args.json, HISTORY, versions, print_history)


def diff(args: argparse.Namespace) -> int:
    """What changed from version ``a`` to ``b``."""
    settings = load(args)

    def local(client: QdrantClient) -> RubricDiff:
        store = _rubric_store(client, settings)
        return diff_rubrics(store.get(args.a), store.get(args.b))

    params = {"a": args.a, "b": args.b}
    found = read_store(settings, args.url, DIFF, local, "/rubrics/diff", params)
    return output(args.json, DIFF, found, print_diff)


def print_rubric(rubric: RubricPublic) -> None:
    """One version with its criteria."""
    print(
        f"rubric version {rubric.version} (origin {rubric.origin}, parent "
        f"{rubric.parent}, step {rubric.step}, created {rubric.created_at})"
    )
    for kind, criteria in (("anchors", rubric.anchors), ("adaptive", rubric.adaptive)):
        print(f"{kind}:")
        if not criteria:
            print("  (none)")
        for c in criteria:
            cites = f"  (rests on: {', '.join(c.findings)})" if c.findings else ""
            print(f"  {c.id:>4}  weight {c.weight:+.2f}  {c.text}{cites}")


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_history(versions: list[RubricPublic]) -> None:
    """One line per version."""
    if not versions:
        print("no rubric version yet (a server creates version 1 at start)")
        return
    print(
        f"{'version':>7}  {'parent':>6}  {'origin':<8}  {'step':>5}  {'created_at':<32}  adaptive"
    )
    for v in versions:
        print(
            f"{v.version:>7}  {_dash(v.parent):>6}  {v.origin:<8}  "
            f"{_dash(v.step):>5}  {v.created_at:<32}  {len(v.adaptive):>8}"
        )


def _criterion(sign: str, c: CriterionPublic) -> str:
    return f"{sign} {c.id:>4}  weight {c.weight:+.2f}  {c.text}"


def print_diff(diff: RubricDiff) -> None:
    """``+`` added, ``-`` removed, ``~`` changed criteria."""
    counts = f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed"
    if not (diff.added or diff.removed or diff.changed):
        counts = "no differences"
    print(f"rubric {diff.a} -> {diff.b}: {counts}")
    for c in diff.added:
        print(_criterion("+", c))
    for c in diff.removed:
        print(_criterion("-", c))
    for change in diff.changed:
        old, new = change.before, change.after
        weight = (
            f"{old.weight:+.2f}"
            if old.weight == new.weight
            else f"{old.weight:+.2f} -> {new.weight:+.2f}"
        )
        text = new.text if old.text == new.text else f"{old.text} -> {new.text}"
        print(f"~ {change.id:>4}  weight {weight}  {text}")
    if diff.anchors_changed:
        print(
            "note: the anchors differ: the versions belong to different lineages "
            "(`amaris rubrics init`)"
        )
