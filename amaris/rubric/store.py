"""Durable store of immutable rubric versions and the pointer to the one in force.

Versions and pointers are Qdrant points (payload only) in ``<collection>_rubrics``,
so a restart, a replica or a rollback sees the same history. Every change is also
exported to a human-readable ``rubrics.json``.

An adaptive id is never reused within a scope: a version may hold an adaptive id its parent
holds (the criterion kept) or one no version of the scope held before (a new criterion);
:meth:`RubricStore.publish` gives any other criterion a fresh id, so a retired id (``R3``)
never comes back with another meaning, in the rubric or in the ``rewards`` keyed by it.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from qdrant_client import QdrantClient, models

from amaris.atomic import replace_file
from amaris.memory.qdrant import ensure_collection
from amaris.rubric.model import (
    Criterion,
    Origin,
    RubricVersion,
    adaptive_from_config,
    anchors_from_config,
)
from amaris.settings import Settings

log = logging.getLogger("amaris.rubric")

_NAMESPACE = uuid.UUID("6f1c8f7e-2d9b-4d3a-9a51-6a0c7f1a2b3c")


class RubricStoreError(RuntimeError):
    """The store cannot do what was asked (conflicting anchors, unknown version...)."""


def write_durably(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically and durably (:func:`replace_file`)."""
    replace_file(path, [text], durable=True)


def _version_id(scope: str, version: int) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"version/{scope}/{version}"))


def _pointer_id(scope: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"pointer/{scope}"))


class _Pointer(BaseModel):
    """A scope's pointer point (its whole payload): the version in force, and the highest
    version ever written, so that publishing needs no scan of the history."""

    model_config = ConfigDict(extra="ignore")  # a newer store's fields: not this one's

    kind: str = "pointer"
    scope: str = "global"
    current: int
    latest: int | None = None
    """Absent from the pointers of stores older than it: then ``current``."""
    adaptive_held: int | None = None
    """The highest adaptive id number (``R<n>``) a version of the scope ever held; absent
    from the pointers of stores older than it: then read from the history."""

    @property
    def highest(self) -> int:
        """The highest version of the scope ever written."""
        return self.current if self.latest is None else self.latest


_Stored = TypeVar("_Stored", bound=BaseModel)


def _id_number(criterion_id: str) -> int:
    """``R12`` -> 12."""
    return int(criterion_id[1:])


def _fresh_ids(
    scope: str, adaptive: Sequence[Criterion], kept: set[str], held: int
) -> tuple[list[Criterion], int]:
    """``adaptive`` with a fresh id (past ``held``) for each criterion whose id an earlier
    version held but the parent does not (a stale next id), and the highest id now held."""
    fixed: list[Criterion] = []
    for criterion in adaptive:
        if criterion.id not in kept and _id_number(criterion.id) <= held:
            held += 1
            log.warning(
                "scope %r: adaptive %s was held by an earlier version; published as R%d",
                scope,
                criterion.id,
                held,
            )
            criterion = criterion.model_copy(update={"id": f"R{held}"})
        fixed.append(criterion)
    return fixed, max([held, *(_id_number(c.id) for c in fixed)])


class RubricStore:
    """Rubric versions in Qdrant; reads of the version in force come from memory."""

    def __init__(self, client: QdrantClient, collection: str, export_path: Path | None) -> None:
        self._qdrant = client
        self._collection = f"{collection}_rubrics"
        self._export_path = export_path
        self._lock = threading.Lock()
        self._current: dict[str, RubricVersion] = {}
        ensure_collection(client, self._collection, None)

    # -- reads -----------------------------------------------------------------
    def is_cached(self, scope: str) -> bool:
        """True when :meth:`current` answers from memory (no storage read)."""
        return scope in self._current

    def current(self, scope: str = "global") -> RubricVersion:
        """The version in force for ``scope``."""
        cached = self._current.get(scope)
        if cached is not None:
            return cached
        pointer = self._read(_pointer_id(scope), _Pointer)
        if pointer is None:
            raise RubricStoreError(f"no rubric for scope {scope!r}; run `amaris rubrics init`")
        version = self.get(pointer.current, scope)
        self._current[scope] = version
        return version

    def refresh(self) -> list[str]:
        """Re-read the pointers of the scopes held in memory (one read for all of them) and
        load versions another process published. Returns the scopes that changed."""
        scopes = list(self._current)
        if not scopes:
            return []
        points = self._qdrant.retrieve(
            self._collection, ids=[_pointer_id(s) for s in scopes], with_payload=True
        )
        changed = []
        for point in points:
            payload = point.payload or {}
            scope = str(payload.get("scope", "global"))
            held = self._current.get(scope)
            if held is not None and int(payload.get("current", held.version)) != held.version:
                self._current[scope] = self.get(int(payload["current"]), scope)
                changed.append(scope)
        return changed

    def get(self, version: int, scope: str = "global") -> RubricVersion:
        """One version by number."""
        found = self._read(_version_id(scope, version), RubricVersion)
        if found is None:
            raise RubricStoreError(f"rubric version {version} does not exist (scope {scope!r})")
        return found

    def history(self, scope: str | None = "global") -> list[RubricVersion]:
        """Every version (of one scope, or all with ``scope=None``), oldest first."""
        versions: list[RubricVersion] = []
        offset: Any = None
        while True:
            points, offset = self._qdrant.scroll(
                self._collection, limit=256, offset=offset, with_payload=True
            )
            for point in points:
                payload = point.payload or {}
                if payload.get("kind") != "version":
                    continue
                v = RubricVersion.model_validate(payload["rubric"])
                if scope is None or v.scope == scope:
                    versions.append(v)
            if offset is None:
                break
        return sorted(versions, key=lambda v: (v.scope, v.version))

    # -- writes ----------------------------------------------------------------
    def publish(
        self,
        *,
        anchors: Sequence[Criterion],
        adaptive: Sequence[Criterion],
        origin: Origin,
        step: int | None,
        next_adaptive_id: int,
        scope: str = "global",
        export: bool = True,
    ) -> RubricVersion:
        """Write a new immutable version and make it current.

        ``export=False`` skips rewriting ``rubrics.json`` (the step flow exports once at
        its end instead of once per scope).
        """
        with self._lock:
            parent = self._current_or_none(scope)
            pointer = self._read(_pointer_id(scope), _Pointer)
            # The pointer remembers the highest version ever written: no scan of history.
            number = (pointer.highest if pointer else 0) + 1
            held = self._adaptive_held(scope, pointer)
            kept = {c.id for c in parent.adaptive} if parent else set()
            adaptive, held = _fresh_ids(scope, adaptive, kept, held)
            version = RubricVersion(
                version=number,
                scope=scope,
                parent=parent.version if parent else None,
                step=step,
                origin=origin,
                anchors=tuple(anchors),
                adaptive=tuple(adaptive),
                next_adaptive_id=max(next_adaptive_id, held + 1),
            )
            # Version first, pointer second: a crash between them leaves the old version
            # in force and an unreferenced (harmless) newer version.
            self._qdrant.upsert(
                self._collection,
                points=[
                    models.PointStruct(
                        id=_version_id(scope, number),
                        vector={},
                        payload={"kind": "version", "rubric": version.model_dump(mode="json")},
                    )
                ],
            )
            self._qdrant.upsert(
                self._collection,
                points=[
                    models.PointStruct(
                        id=_pointer_id(scope),
                        vector={},
                        payload=_Pointer(
                            scope=scope, current=number, latest=number, adaptive_held=held
                        ).model_dump(),
                    )
                ],
            )
            self._current[scope] = version
            if export:
                self.export()
            return version

    def ensure_initialized(self, settings: Settings) -> RubricVersion:
        """Create version 1 from config on first start; refuse config anchors that differ."""
        current = self._current_or_none("global")
        anchors = anchors_from_config(settings.anchor_rubrics)
        if current is None:
            return self.reset_from_config(settings)

        # A rule is part of an anchor: a changed check is a changed criterion.
        def key(a: Criterion) -> tuple[object, ...]:
            return (a.text, a.weight, a.rule)

        if [key(a) for a in current.anchors] != [key(a) for a in anchors]:
            raise RubricStoreError(
                "anchor_rubrics in the configuration differ from the anchors of rubric version "
                f"{current.version} in the store; anchors are immutable during a run. "
                "Run `amaris rubrics init` to start a new rubric lineage from the configuration."
            )
        return current

    def reset_from_config(self, settings: Settings, scope: str = "global") -> RubricVersion:
        """Publish a version made of the configured anchors and adaptive criteria (their
        ids: :meth:`renumbered`)."""
        adaptive, next_id = self.renumbered(adaptive_from_config(settings.adaptive_rubrics), scope)
        return self.publish(
            anchors=anchors_from_config(settings.anchor_rubrics),
            adaptive=adaptive,
            origin="config",
            step=None,
            next_adaptive_id=next_id,
            scope=scope,
        )

    def renumbered(
        self, adaptive: Sequence[Criterion], scope: str = "global"
    ) -> tuple[tuple[Criterion, ...], int]:
        """``adaptive`` (a new set: the configuration's, a bootstrap's) with ids
        :meth:`publish` accepts, and the next free id: a criterion the version in force holds
        as it is (text, weight, rule) takes that criterion's id, the others ids no version of
        ``scope`` held."""
        parent = self._current_or_none(scope)
        held_now = {(c.text, c.weight, c.rule): c.id for c in parent.adaptive} if parent else {}
        next_id = self._adaptive_held(scope, self._read(_pointer_id(scope), _Pointer)) + 1
        renumbered: list[Criterion] = []
        for criterion in adaptive:
            kept = held_now.get((criterion.text, criterion.weight, criterion.rule))
            if kept is None:
                kept = f"R{next_id}"
                next_id += 1
            renumbered.append(criterion.model_copy(update={"id": kept}))
        return tuple(renumbered), next_id

    def export(self) -> None:
        """Write every version and the current pointers to ``rubrics.json`` atomically and
        durably: the record :mod:`amaris.rubric.integrity` restores a damaged store from."""
        if self._export_path is None:
            return
        versions = self.history(scope=None)
        # Every scope's stored pointer, not only the scopes this process has read.
        current = self.pointers()
        document = {
            "current": current,
            "versions": [v.model_dump(mode="json") for v in versions],
        }
        write_durably(self._export_path, json.dumps(document, indent=2, ensure_ascii=False))

    def pointers(self) -> dict[str, int]:
        """The version in force per scope, as stored (every scope, none cached)."""
        found: dict[str, int] = {}
        offset: Any = None
        while True:
            # Only the pointer fields: the versions' payloads are not read.
            points, offset = self._qdrant.scroll(
                self._collection,
                limit=256,
                offset=offset,
                with_payload=["kind", "scope", "current"],
            )
            for point in points:
                payload = point.payload or {}
                if payload.get("kind") == "pointer":
                    found[str(payload["scope"])] = int(payload["current"])
            if offset is None:
                return found

    def restore(self, versions: Sequence[RubricVersion], current: dict[str, int]) -> None:
        """Write back versions lost from the store, as they were (same numbers, same
        content), and point each scope of ``current`` at its version.

        For :mod:`amaris.rubric.integrity` at start-up, before anything reads the store.
        """
        with self._lock:
            self._qdrant.upsert(
                self._collection,
                points=[
                    models.PointStruct(
                        id=_version_id(v.scope, v.version),
                        vector={},
                        payload={"kind": "version", "rubric": v.model_dump(mode="json")},
                    )
                    for v in versions
                ],
            )
            latest: dict[str, int] = {}
            for v in [*versions, *self.history(scope=None)]:
                latest[v.scope] = max(latest.get(v.scope, 0), v.version)
            self._qdrant.upsert(
                self._collection,
                points=[
                    models.PointStruct(
                        id=_pointer_id(scope),
                        vector={},
                        payload=_Pointer(
                            scope=scope,
                            current=number,
                            latest=max(number, latest.get(scope, number)),
                        ).model_dump(),
                    )
                    for scope, number in current.items()
                ],
            )
            for scope in current:
                self._current.pop(scope, None)

    # -- helpers ---------------------------------------------------------------
    def _adaptive_held(self, scope: str, pointer: _Pointer | None) -> int:
        """The highest adaptive id number a version of ``scope`` held (0: none)."""
        if pointer is None:
            return 0
        if pointer.adaptive_held is not None:
            return pointer.adaptive_held
        held = [_id_number(c.id) for v in self.history(scope) for c in v.adaptive]
        return max(held, default=0)

    def _current_or_none(self, scope: str) -> RubricVersion | None:
        try:
            return self.current(scope)
        except RubricStoreError:
            return None

    def _read(self, point_id: str, stored: type[_Stored]) -> _Stored | None:
        """The point's payload as ``stored`` (a version point's: its ``rubric``); None when
        there is no such point."""
        points = self._qdrant.retrieve(self._collection, ids=[point_id], with_payload=True)
        if not points:
            return None
        payload = points[0].payload or {}
        return stored.model_validate(
            payload["rubric"] if payload.get("kind") == "version" else payload
        )
