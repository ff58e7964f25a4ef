"""Batch scoring, shared by ``POST /batch_score`` and OpenRLHF's ``POST /get_reward``.

A batch is admitted as a whole (:meth:`BatchScoring.admit`: its size and the judge's
queue), each item is checked without side effects (:meth:`BatchScoring.check`: the body's
validation and :meth:`Scorer.check`), then the checked requests are scored concurrently
(:meth:`BatchScoring.score`). An item that fails a check or is refused while scored is an
:class:`InvalidItem`: its problems name their field as a path inside the item
(``("rollout", "output")``), which each route renders into its own answer (``/batch_score``
as ``items[i].rollout.output``, ``/get_reward`` as the OpenRLHF field the value came from).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from amaris.logs import loggable
from amaris.models import ScoreRequest, ScoreResponse
from amaris.rubric.scopes import ScopeResolver
from amaris.scoring.group import plan_seats, seated
from amaris.scoring.refusals import OverloadedError, OversizeError
from amaris.scoring.reward import held_counts
from amaris.scoring.rollout_ids import RolloutConflictError
from amaris.scoring.rules import RuleInputError, check_references
from amaris.scoring.scorer import Scorer
from amaris.steps.coordinator import StepRefusedError
from amaris.text_fields import valid_text

log = logging.getLogger("amaris.api")

Path = tuple[str | int, ...]
"""Where a value is, as pydantic locates it: keys, and list indexes as ints."""


def render_path(path: Path, prefix: str = "") -> str:
    """``("rollout", "output")`` -> ``rollout.output``; list indexes as ``[i]``, after
    ``prefix`` when given (``items[3]`` -> ``items[3].rollout.output``)."""
    parts: list[str] = [prefix] if prefix else []
    for part in path:
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1]}[{part}]"] if parts else [f"[{part}]"]
        else:
            parts.append(part)
    return ".".join(parts)


_UNION_LABELS = frozenset(
    {
        "function-after",
        "function-before",
        "function-wrap",
        "function-plain",
        "list",
        "dict",
        "set",
        "frozenset",
        "tuple",
        "literal",
        "union",
        "tagged-union",
        "nullable",
        "json-or-python",
        "lax-or-strict",
        "is-instance",
        "chain",
        "default",
    }
)
"""The kinds of label pydantic puts in a location for each member of a union that failed."""


def _union_label(part: str) -> bool:
    """Whether a location part is pydantic's label of a union member
    (``function-after[valid_text(), str]``, ``list[TextPart]``): not a field of the
    request, so a field name leaves it out."""
    kind, bracket, _ = part.partition("[")
    return bool(bracket) and part.endswith("]") and kind in _UNION_LABELS


def bounded_path(loc: Sequence[object]) -> Path:
    """A pydantic ``loc`` as a :data:`Path` fit to be sent back and logged: the fields and
    indexes of the request only (a union member's label left out, so a message's
    ``content`` is named ``messages[0].content``), a key (which may come from the body, an
    unknown field) cut to 100 characters and a lone surrogate in it escaped."""
    return tuple(
        part
        if isinstance(part, int)
        else str(part)[:100].encode("utf-8", "backslashreplace").decode("utf-8")
        for part in loc
        if isinstance(part, int) or not _union_label(str(part))
    )


@dataclass(frozen=True)
class ItemProblem:
    """One thing wrong with a batch item: where (a path inside the item; ``()`` for the
    item itself) and what."""

    path: Path
    message: str


@dataclass(frozen=True)
class InvalidItem:
    """A batch item that is not scored: nothing was judged or stored for it."""

    index: int
    rollout_id: str | None
    problems: tuple[ItemProblem, ...]

    @property
    def path(self) -> Path:
        """The path of the first problem: the field the item is refused for."""
        return self.problems[0].path

    def reason(self) -> str:
        """Every problem as ``items[i].<field>: <message>``, joined by ``; ``."""
        prefix = f"items[{self.index}]"
        return "; ".join(f"{render_path(p.path, prefix)}: {p.message}" for p in self.problems)


def _refused(item: InvalidItem) -> InvalidItem:
    """``item``, logged as it is refused (under ``amaris.api``: the routes' log)."""
    log.warning("batch item %s invalid: %s", item.index, loggable(item.reason(), limit=1000))
    return item


def _invalid(index: int, rollout_id: str | None, path: Path, message: str) -> InvalidItem:
    return _refused(InvalidItem(index, rollout_id, (ItemProblem(path, message),)))


Checked = ScoreRequest | InvalidItem
"""An item after its checks: the request to score, or why it is not scored."""


@dataclass(frozen=True)
class BatchScoring:
    """The service's parts a batch is admitted, checked and scored with."""

    scorer: Scorer
    score_one: Callable[[ScoreRequest], Awaitable[ScoreResponse]]
    """:func:`amaris.scoring.reward.score_rollout` with the service's parts."""
    max_items: int
    """``server.max_batch_items``."""
    max_pending: int | None
    """``scoring.max_pending``."""
    scopes: ScopeResolver
    """Each item's scope and the criteria it is scored with (:meth:`check_scopes`)."""

    def admit(self, field: str, size: int) -> None:
        """Refuse a batch of ``size`` items (named ``field``) over the batch or queue bounds.

        Raises:
            OversizeError: more than ``server.max_batch_items``.
            OverloadedError: the judge calls pending and these would pass
                ``scoring.max_pending``.
        """
        if size > self.max_items:
            raise OversizeError((field,), size, self.max_items, unit="items")
        pending = self.scorer.pending
        if self.max_pending is not None and pending + size > self.max_pending:
            raise OverloadedError(
                f"{pending} judge calls pending and {size} more asked "
                f"(max_pending {self.max_pending})"
            )

    def check(self, index: int, raw: object, include_breakdown: bool) -> Checked:
        """Item ``index`` of a batch as a request to score, or why it is invalid.

        The checks of ``/score`` (the body's validation, :meth:`Scorer.check`), without
        side effects.
        """
        rollout_id = _raw_id(raw)
        if not isinstance(raw, dict):
            return _invalid(index, None, (), "must be an object {rollout, metadata}")
        try:
            request = ScoreRequest.model_validate({"include_breakdown": include_breakdown, **raw})
            self.scorer.check(request)
        except ValidationError as exc:
            problems = tuple(
                ItemProblem(bounded_path(err["loc"]), str(err["msg"])) for err in exc.errors()
            )
            return _refused(InvalidItem(index, rollout_id, problems))
        except (OversizeError, RuleInputError) as exc:
            return _invalid(index, rollout_id, exc.path, str(exc))
        return request

    async def check_scopes(self, requests: Sequence[ScoreRequest]) -> list[InvalidItem]:
        """The requests, checked already, whose own rubric (``per_instance`` mode: the
        prompt's, maybe not created yet) has a rule criterion they give no reference for.

        :meth:`check` reads the global rubric; for a batch answered as a whole
        (``/get_reward``: one refused item refuses every item) this reads each item's own,
        so that a refused batch has scored and logged nothing. Creates nothing.
        """
        invalid: list[InvalidItem] = []
        for index, request in enumerate(requests):
            scope = self.scopes.scope_of(request.rollout.input)
            try:
                check_references(await self.scopes.criteria(scope), request.rollout)
            except RuleInputError as exc:
                invalid.append(_invalid(index, request.rollout.id, exc.path, str(exc)))
        return invalid

    async def score(self, checked: Sequence[Checked]) -> list[ScoreResponse | InvalidItem]:
        """Score the requests among ``checked`` concurrently; answers in order (an
        :class:`InvalidItem` in ``checked`` is kept, and a request refused while scored
        becomes one).

        An error that refuses the whole batch (an item's durable write failed) is raised
        once every item is done, the first in the items' order: nothing of the batch is
        still running when it is answered, and none of its answers is counted in
        ``/healthz`` ``counters`` (:func:`~amaris.scoring.reward.held_counts`).
        """

        seats = plan_seats(self.scorer.groups, checked)

        async def one(index: int, request: ScoreRequest) -> ScoreResponse | InvalidItem:
            rollout_id = request.rollout.id
            try:
                with seated(seats.get(index)):
                    return await self.score_one(request)
            except (RolloutConflictError, RuleInputError) as exc:
                return _invalid(index, rollout_id, exc.path, str(exc))
            except StepRefusedError as exc:
                # The step is the item's own metadata.current_step (its dotted field name).
                return _invalid(index, rollout_id, tuple(exc.field.split(".")), str(exc))
            except OverloadedError as exc:
                return ScoreResponse(
                    score=None,
                    rubric_version=None,
                    status="unscored",
                    rollout_id=rollout_id,
                    reason=f"overloaded: {exc}",
                )

        pending = [one(i, item) for i, item in enumerate(checked) if isinstance(item, ScoreRequest)]
        with held_counts(self.scorer):
            answers = await asyncio.gather(*pending, return_exceptions=True)
            for answer in answers:
                if isinstance(answer, BaseException):
                    raise answer
        scored = iter([a for a in answers if not isinstance(a, BaseException)])
        return [next(scored) if isinstance(item, ScoreRequest) else item for item in checked]


def _raw_id(raw: object) -> str | None:
    """The rollout id of an item that may not validate, if it can be shown as one."""
    rollout = raw.get("rollout") if isinstance(raw, dict) else None
    rollout_id = rollout.get("id") if isinstance(rollout, dict) else None
    if not isinstance(rollout_id, str | int) or isinstance(rollout_id, bool):
        return None
    text = str(rollout_id)
    try:
        return valid_text(text) if len(text) <= 512 else None
    except ValueError:
        return None
