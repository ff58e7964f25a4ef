"""Rubric scopes: one global rubric, or one per input (``memory.rubrics_mode: per_instance``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from amaris.rubric.model import (
    Criterion,
    RubricVersion,
    adaptive_from_config,
    anchors_from_config,
)
from amaris.rubric.store import RubricStore, RubricStoreError
from amaris.settings import RubricItem, Settings

GLOBAL = "global"


def input_id(text: str) -> str:
    """The per-instance scope of a prompt: a short hash of its whitespace-normalised text."""
    normalised = " ".join(text.split())
    return "in-" + hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:16]


class _Preset(BaseModel):
    """One input's entry of the per-instance rubrics file."""

    model_config = ConfigDict(extra="ignore")

    anchor_rubrics: list[RubricItem] = []
    adaptive_rubrics: list[RubricItem] = []


def load_presets(path: Path | None) -> dict[str, dict[str, list[RubricItem]]]:
    """Per-instance rubrics from ``memory.per_instance_rubrics_path``.

    The JSON maps an input id (or the input text itself) to either a list of
    ``{text, weight}`` (adaptive criteria) or ``{"anchor_rubrics": [...],
    "adaptive_rubrics": [...]}``.
    """
    if path is None:
        return {}
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object keyed by input id")
    presets: dict[str, dict[str, list[RubricItem]]] = {}
    for key, value in raw.items():
        scope = key if key.startswith("in-") else input_id(key)
        entry = _Preset.model_validate(
            value if isinstance(value, dict) else {"adaptive_rubrics": value}
        )
        presets[scope] = {
            "anchor_rubrics": entry.anchor_rubrics,
            "adaptive_rubrics": entry.adaptive_rubrics,
        }
    return presets


class ScopeResolver:
    """Finds the scope of a rollout and the rubric in force for it."""

    def __init__(self, settings: Settings, store: RubricStore) -> None:
        self._settings = settings
        self._store = store
        self._per_instance = settings.memory.rubrics_mode == "per_instance"
        self._presets = load_presets(settings.memory.per_instance_rubrics_path)
        self._creating: dict[str, asyncio.Lock] = {}

    def scope_of(self, input_text: str) -> str:
        """``global``, or the input id in per-instance mode."""
        return input_id(input_text) if self._per_instance else GLOBAL

    async def rubric(self, scope: str) -> RubricVersion:
        """The version in force for ``scope``; a new input gets its first version."""
        stored = await self._stored(scope)
        if stored is not None:
            return stored
        lock = self._creating.setdefault(scope, asyncio.Lock())
        async with lock:
            if self._store.is_cached(scope):
                return self._store.current(scope)
            return await asyncio.to_thread(self._create, scope)

    async def criteria(self, scope: str) -> tuple[Criterion, ...]:
        """The criteria a rollout of ``scope`` is scored with: its rubric's in force, or for
        an input without one the criteria its first version will have. Creates nothing: a
        batch checks with it before any of its items is scored (``/get_reward``)."""
        stored = await self._stored(scope)
        if stored is not None:
            return stored.criteria
        anchors, adaptive = self._first(scope)
        return (*anchors, *adaptive)

    async def _stored(self, scope: str) -> RubricVersion | None:
        """``scope``'s version in force (read off the loop unless cached), or None for an
        input without one yet.

        Raises:
            RubricStoreError: the global rubric cannot be read.
        """
        try:
            if self._store.is_cached(scope):
                return self._store.current(scope)
            return await asyncio.to_thread(self._store.current, scope)
        except RubricStoreError:
            if scope == GLOBAL:
                raise
            return None

    def _first(self, scope: str) -> tuple[tuple[Criterion, ...], tuple[Criterion, ...]]:
        """The anchors and adaptive criteria of ``scope``'s first version (its preset, or
        the config's)."""
        preset = self._presets.get(scope, {})
        anchors_cfg = preset.get("anchor_rubrics") or self._settings.anchor_rubrics
        adaptive_cfg = preset.get("adaptive_rubrics") or self._settings.adaptive_rubrics
        return anchors_from_config(anchors_cfg), adaptive_from_config(adaptive_cfg)

    def _create(self, scope: str) -> RubricVersion:
        anchors, adaptive = self._first(scope)
        return self._store.publish(
            anchors=anchors,
            adaptive=adaptive,
            origin="config",
            step=None,
            next_adaptive_id=len(adaptive) + 1,
            scope=scope,
            export=False,
        )
