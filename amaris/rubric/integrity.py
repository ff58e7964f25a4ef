"""Start-up check of the rubric store against amaris's own durable record of it.

The store (``<collection>_rubrics`` in Qdrant) is the truth while it is whole. Two records
outlive damage to it: ``rubrics.json`` (every version in full, and the pointers; written
atomically and fsynced by :meth:`RubricStore.export`) and the step registry (the version
each step published, and the steps themselves: a registry with steps means the store had
a rubric). A store that lost what these records hold (its collection folder deleted, its
``storage.sqlite`` truncated) is:

- **restored** from ``rubrics.json`` when the record holds every lost version: rubric
  versions are immutable, so the record's copy is the version itself, written back under
  its number; the restore is logged as an error naming each version;
- **refused** otherwise (:class:`RubricStoreDamagedError`, naming what is missing and who
  refers to it), never re-created as version 1 from the configuration while steps stay
  marked done under versions that no longer exist.

A version held by both with different content (a store reset and published again) is
refused too: which lineage the steps' rewards came from cannot be told.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from amaris.memory.rollout_log import StepRegistry
from amaris.rubric.model import RubricVersion
from amaris.rubric.store import RubricStore, RubricStoreError

log = logging.getLogger("amaris.rubric")

Key = tuple[str, int]
"""A version's identity: ``(scope, version)``."""


class RubricStoreDamagedError(RubricStoreError):
    """The rubric store lost versions amaris's record holds and it cannot restore them."""


class RubricRecord(BaseModel):
    """``rubrics.json`` as :meth:`RubricStore.export` writes it."""

    model_config = ConfigDict(extra="ignore")

    current: dict[str, int]
    versions: list[RubricVersion]


@dataclass
class CheckResult:
    """What the check found: the versions it wrote back (none when the store was whole)."""

    restored: list[Key] = field(default_factory=list)
    pointers: dict[str, int] = field(default_factory=dict)


def read_record(path: Path | None) -> tuple[RubricRecord | None, str | None]:
    """``rubrics.json`` parsed, or None with why (absent, unreadable)."""
    if path is None:
        return None, "no rubrics.json is kept (memory.rubrics_path)"
    if not path.is_file():
        return None, f"{path} does not exist"
    try:
        return RubricRecord.model_validate_json(path.read_bytes()), None
    except (OSError, ValidationError) as exc:
        return None, f"{path} is unreadable ({type(exc).__name__}: {str(exc)[:300]})"


def _names(keys: list[Key]) -> str:
    return ", ".join(f"{scope!r} v{version}" for scope, version in sorted(keys))


def check_rubric_store(
    store: RubricStore, record_path: Path | None, steps: StepRegistry
) -> CheckResult:
    """Compare the store with ``rubrics.json`` and the step registry; restore or refuse.

    Blocking; at start-up, before the store is initialised or read.

    Raises:
        RubricStoreDamagedError: the store lost versions (or its whole rubric) that the
            record cannot give back, or holds a version whose content differs from the
            record's.
    """
    held = {(v.scope, v.version): v for v in store.history(scope=None)}
    pointers = store.pointers()
    record, unreadable = read_record(record_path)
    recorded = {(v.scope, v.version): v for v in (record.versions if record else [])}

    # Who refers to which version: the record itself, and every step that published one.
    wanted: dict[Key, list[str]] = {}
    for key in recorded:
        wanted.setdefault(key, []).append("rubrics.json")
    entries = steps.list()
    for entry in entries:
        for scope, version in entry.rubric_versions.items():
            wanted.setdefault((scope, version), []).append(f"step {entry.step}")
    missing = sorted(key for key in wanted if key not in held)

    differing = sorted(key for key in recorded.keys() & held.keys() if recorded[key] != held[key])
    if differing:
        raise RubricStoreDamagedError(
            f"the rubric store and {record_path} disagree on the content of rubric "
            f"version(s) {_names(differing)}: the store was reset and published again. "
            "Refusing to start: restore the data folder from a backup, or start a new run "
            "with another memory.collection (or data folder)."
        )

    # The global scope exists from the first start on: steps without it mean it was lost
    # (the record's global versions, if any, are then among the missing).
    lost_global = bool(entries) and not any(scope == "global" for scope, _ in held)
    if not missing and not lost_global:
        return CheckResult()

    unrecoverable = [key for key in missing if key not in recorded]
    if unrecoverable or (lost_global and not any(scope == "global" for scope, _ in recorded)):
        referrers = "; ".join(
            f"{_names([key])} (referred to by {', '.join(wanted[key][:5])})"
            for key in unrecoverable
        )
        done = [e.step for e in entries if e.status != "open"]
        raise RubricStoreDamagedError(
            "the rubric store lost versions that amaris recorded and cannot restore them: "
            + (referrers or "the store holds no global rubric")
            + (f"; steps {_span(done)} are marked done or running under them" if done else "")
            + f"; {unreadable or 'rubrics.json lacks them'}. Refusing to start rather than "
            "begin again at version 1. Restore the data folder (or rubrics.json) from a "
            "backup, or start a new run with another memory.collection (or data folder)."
        )

    assert record is not None  # every missing version is in it
    restored = [recorded[key] for key in missing]
    scopes = {scope for scope, _ in missing}
    current: dict[str, int] = {}
    for scope in scopes:
        stored = pointers.get(scope)
        if stored is not None and (scope, stored) in held:
            continue  # the store's own pointer still names a version it holds
        fallback = max(version for s, version in [*held, *missing] if s == scope)
        current[scope] = record.current.get(scope, fallback)
    store.restore(restored, current)
    log.error(
        "the rubric store had lost rubric version(s) %s (its Qdrant collection was deleted "
        "or damaged); restored them from %s%s",
        _names(missing),
        record_path,
        f", version in force: {current}" if current else "",
    )
    return CheckResult(restored=missing, pointers=current)


def _span(steps: list[int]) -> str:
    ordered = sorted(steps)
    if len(ordered) <= 6:
        return ", ".join(map(str, ordered))
    return f"{ordered[0]}-{ordered[-1]} ({len(ordered)} steps)"
