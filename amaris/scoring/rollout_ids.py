"""One rollout per id in a step: a second, different rollout under a logged id is refused.

The step pipeline analyses one record per rollout id, and its analyses are stored and
shown by id: a second rollout under the same id with other content would be analysed
in place of the first, and both records would show its analysis. So, per step, amaris
remembers the content digest of every id logged or being scored:

- the same id with the same content (a client retrying) is scored and logged again,
  like the first time; the pipeline keeps the last record of an id;
- the same id with other content is a :class:`RolloutConflictError` (HTTP 409), raised
  before anything is judged or stored.

The index is rebuilt from the rollout log when a step is first touched by this process
(after a restart, say), and kept for the ``steps_kept`` most recently used steps. It is
this process's view: replicas sharing a store each check what they logged, plus what the
step held when they first touched it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from amaris.logs import loggable
from amaris.memory.rollout_log import RolloutLog
from amaris.models import Rollout

_CONTENT = ("input", "output", "supplemental_context", "group_id")


class RolloutConflictError(ValueError):
    """A rollout id already logged (or being scored) in its step with other content."""

    path = ("rollout", "id")
    field = "rollout.id"

    def __init__(self, rollout_id: str, step: int) -> None:
        super().__init__(
            f"rollout id {loggable(rollout_id)} is already in step {step} with different "
            "content (input, output, messages, outcome, finish_reason, supplemental_context, "
            "group_id or metadata); rollout ids are unique within a step, and only an "
            "identical retry is accepted"
        )


class _Content(Protocol):
    """A rollout whose content :func:`content_digest` reads: a request's
    (:class:`~amaris.models.Rollout`) or a logged one
    (:class:`~amaris.memory.records.LoggedRollout`)."""

    @property
    def input(self) -> str: ...
    @property
    def output(self) -> str: ...
    @property
    def supplemental_context(self) -> str | None: ...
    @property
    def group_id(self) -> str | None: ...
    @property
    def metadata(self) -> object:
        """The trainer's JSON, read only to be serialised."""


def content_digest(rollout: _Content) -> str:
    """What identifies a rollout's content: its fields but the id, and its metadata."""
    digest = hashlib.sha256()
    for name in _CONTENT:
        value = getattr(rollout, name)
        # Length-prefixed: no two different field lists give the same bytes. surrogatepass:
        # records of older versions may hold lone surrogates and must not fail the index.
        encoded = b"\xff" if value is None else str(value).encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "big") + encoded)
    metadata = rollout.metadata
    if metadata is not None:
        text = json.dumps(metadata, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


@dataclass
class _Entry:
    digest: str
    holders: int = 0
    """Requests with this id between their claim and the end of their record."""
    stored: bool = False


@dataclass(frozen=True)
class Claim:
    """A request's hold on its rollout id; give it back with :meth:`RolloutIds.release`."""

    step: int
    rollout_id: str


class RolloutIds:
    """Per step: rollout id -> content digest, for the ``steps_kept`` latest used steps."""

    def __init__(self, rollouts: RolloutLog, steps_kept: int = 8) -> None:
        self._rollouts = rollouts
        self._steps_kept = steps_kept
        self._steps: OrderedDict[int, dict[str, _Entry]] = OrderedDict()
        self._loading: dict[int, asyncio.Future[dict[str, _Entry]]] = {}

    async def claim(self, step: int, rollout: Rollout) -> Claim:
        """Hold ``rollout.id`` in ``step`` for a request about to be scored and logged.

        Raises:
            RolloutConflictError: the id is in the step with other content.
        """
        digest = content_digest(rollout)
        index = await self._index(step)
        # From here to the return nothing awaits: concurrent claims of one id are decided
        # one after the other, so exactly one of two different contents gets in.
        entry = index.get(rollout.id)
        if entry is None:
            entry = index[rollout.id] = _Entry(digest)
        elif entry.digest != digest:
            raise RolloutConflictError(rollout.id, step)
        entry.holders += 1
        return Claim(step, rollout.id)

    def release(self, claim: Claim, stored: bool) -> None:
        """The request holding ``claim`` ended; ``stored``: its record is in the log."""
        index = self._steps.get(claim.step)
        entry = index.get(claim.rollout_id) if index is not None else None
        if entry is None or index is None:
            return
        entry.holders -= 1
        entry.stored = entry.stored or stored
        if entry.holders <= 0 and not entry.stored:
            del index[claim.rollout_id]

    async def _index(self, step: int) -> dict[str, _Entry]:
        index = self._steps.get(step)
        if index is not None:
            self._steps.move_to_end(step)
            return index
        loading = self._loading.get(step)
        if loading is None:
            loading = asyncio.get_running_loop().create_future()
            self._loading[step] = loading
            try:
                records = await asyncio.to_thread(self._rollouts.load_step, step)
            except BaseException as exc:
                loading.set_exception(
                    exc
                    if isinstance(exc, Exception)
                    else RuntimeError("loading the step's rollout ids was cancelled")
                )
                loading.exception()  # retrieved: waiters, if any, re-raise it themselves
                raise
            finally:
                self._loading.pop(step, None)
            built = {r.rollout.id: _Entry(content_digest(r.rollout), stored=True) for r in records}
            self._steps[step] = built
            self._evict()
            loading.set_result(built)
            return built
        return await asyncio.shield(loading)

    def _evict(self) -> None:
        """Forget the least recently used steps past ``steps_kept``; never one with a
        request in flight (its claims would be lost)."""
        for step in list(self._steps):
            if len(self._steps) <= self._steps_kept:
                return
            if not any(e.holders for e in self._steps[step].values()):
                del self._steps[step]
