"""Listwise judging (``scoring.group_mode: listwise``): the rollouts of one batch that share a
``group_id`` (a GRPO group) are judged in one call, relative to each other.

Only batches group (``/batch_score``, ``/get_reward``; :func:`plan_seats`). Each batch item
of a group of two or more gets a :class:`Seat` for its task (a context variable); the
scorer, at the point where it would ask the judge about that one rollout, hands its judged
fields to the seat instead (:func:`take_seat`). A rollout that does not get there (the
pre-check's floor, the cache, rule criteria alone, a refused item, an identical rollout in
flight, a trajectory) leaves its seat. Once every member arrived or left (or
``scoring.group_wait_seconds`` after the first arrival), the members that arrived are
partitioned by rubric version, step and prompt, and each part of two or more is shown in a
shuffled order seeded by its content, in calls of at most ``scoring.group_max_rollouts``
that fit the judge's context budget (:class:`GroupJudge`).

A member the call does not decide (an error, a timeout, a malformed reply, its label missing
or incomplete) is judged on its own, as in pointwise mode; the batch never fails for it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from amaris.agents.prompts import builtin_prompt
from amaris.llm.budget import estimate_messages
from amaris.llm.gateway import (
    LLMContextOverflowError,
    LLMGateway,
    LLMOutputError,
    LLMUnavailableError,
)
from amaris.models import ScoreRequest
from amaris.rubric.aggregate import aggregate
from amaris.rubric.model import RubricVersion
from amaris.scoring.group_bias import PositionBias
from amaris.scoring.group_protocol import (
    GROUP_PROMPT,
    GroupVerdicts,
    decided_labels,
    group_example,
    group_messages,
    group_schema,
    group_seed,
    labels,
    shown_order,
)
from amaris.scoring.judge_calls import JudgeCalls
from amaris.scoring.judge_protocol import Verdict
from amaris.scoring.judgement import Judged
from amaris.settings import ScoringSettings

log = logging.getLogger("amaris.scoring.group")


@dataclass
class _Member:
    """A rollout that arrived for its group's call: what the scorer would have judged."""

    rubric: RubricVersion
    fields: dict[str, str]
    step: int
    future: asyncio.Future[Judged | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def content(self) -> tuple[str, str, str]:
        f = self.fields
        return (f["input"], f["supplemental_context"], f["output"])


class GroupJudge:
    """Judges groups in one call each, on the scorer's endpoint; counts in ``counters``:
    ``group.calls`` (listwise calls), ``group.rollouts`` (rollouts they decided),
    ``group.fallback`` (rollouts of a group judged on their own after its call failed for
    them), ``group.failed.<kind>`` (failed calls), ``group.split`` (a part halved to fit the
    context budget), and the position-bias check's (:class:`PositionBias`)."""

    def __init__(
        self,
        settings: ScoringSettings,
        gateway: LLMGateway,
        counters: Counter[str],
        calls: JudgeCalls,
    ) -> None:
        self._settings = settings
        self._gateway = gateway
        self._counters = counters
        self._calls = calls
        self._prompt = builtin_prompt(GROUP_PROMPT)
        self._tasks: set[asyncio.Task[None]] = set()
        self.bias = PositionBias(settings.group_bias_bound, counters)

    @property
    def wait_seconds(self) -> float:
        """``scoring.group_wait_seconds``."""
        return self._settings.group_wait_seconds

    def start(self, members: list[_Member]) -> None:
        """Judge one part (same rubric, step and prompt) in the background; each member's
        future gets its :class:`Judged`, or None (judge it on its own)."""
        task = asyncio.get_running_loop().create_task(self._judge_part(members))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _judge_part(self, members: list[_Member]) -> None:
        try:
            rubric = members[0].rubric
            contents = [m.content for m in members]
            seed = group_seed(rubric, contents)
            ordered = [members[i] for i in shown_order(seed, contents)]
            size = self._settings.group_max_rollouts
            chunks = [ordered[i : i + size] for i in range(0, len(ordered), size)]
            await asyncio.gather(*(self._judge_chunk(chunk, seed) for chunk in chunks))
        except Exception:
            log.exception("listwise judging failed; its rollouts are judged on their own")
        finally:
            for member in members:
                if not member.future.done():
                    member.future.set_result(None)

    async def _judge_chunk(self, chunk: list[_Member], seed: bytes) -> None:
        if len(chunk) < 2:
            return  # judged on its own (the caller resolves it with None)
        rubric, first = chunk[0].rubric, chunk[0].fields
        shown = labels(seed, len(chunk))
        shared = {"input": first["input"], "supplemental_context": first["supplemental_context"]}
        outputs = [(label, m.fields["output"]) for label, m in zip(shown, chunk, strict=True)]
        messages = group_messages(self._prompt, rubric, shared, outputs)
        budget = await self._gateway.prompt_budget(self._calls.agent)
        if budget is not None and estimate_messages(messages) > budget:
            self._counters["group.split"] += 1
            half = len(chunk) // 2
            await asyncio.gather(
                self._judge_chunk(chunk[:half], seed), self._judge_chunk(chunk[half:], seed)
            )
            return
        call = functools.partial(
            self._gateway.structured_completion,
            self._calls.agent,
            messages,
            GroupVerdicts,
            step=chunk[0].step,
            json_schema=group_schema(rubric, shown),
            account=self._calls.account,
            example=group_example(rubric, shown),
        )
        timeout = self._settings.timeout_seconds
        self._counters["group.calls"] += 1
        try:
            # Half the rollouts' own bound: a member the call fails for has the rest to be
            # judged on its own.
            async with asyncio.timeout(None if timeout is None else timeout / 2):
                replies = await self._calls.replies(call)
        except (LLMUnavailableError, LLMOutputError, TimeoutError) as exc:
            kind = _failure_kind(exc)
            self._counters[f"group.failed.{kind}"] += 1
            self._counters["group.fallback"] += len(chunk)
            log.warning("listwise call of %d rollouts failed (%s)", len(chunk), kind)
            return
        decided = [decided_labels(answer, rubric, shown) for answer, _ in replies]
        rewards: list[float] = []
        for label, member in zip(shown, chunk, strict=True):
            verdicts = [found[label] for found in decided if label in found]
            if len(verdicts) < len(replies):
                self._counters["group.fallback"] += 1
                member.future.set_result(None)
                continue
            judged = self._judged(rubric, verdicts)
            self._counters["group.rollouts"] += 1
            rewards.append(aggregate([c.weight for c in judged.breakdown], _values(judged)))
            member.future.set_result(judged)
        if len(rewards) == len(chunk):
            self.bias.add(rewards)

    def _judged(self, rubric: RubricVersion, replies: list[list[Verdict]]) -> Judged:
        """One label's verdicts over the ``replies`` (one per sample), as one rollout's."""
        by_id = [{v.id: v for v in verdicts} for verdicts in replies]
        return Judged.of_samples(
            rubric,
            len(replies),
            {c.id: [float(reply[c.id].score) for reply in by_id] for c in rubric.judged},
            {c.id: by_id[0][c.id].reason for c in rubric.judged},
            0 if self._calls.logprobs else None,
            listwise=True,
        )


def _values(judged: Judged) -> list[float]:
    return [c.verdict for c in judged.breakdown]


def _failure_kind(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "judge_timeout"
    if isinstance(exc, LLMContextOverflowError):
        return "judge_context_overflow"
    if isinstance(exc, LLMUnavailableError):
        return "judge_unavailable"
    return "judge_invalid"


class Gathering:
    """One batch group's members, until every one arrived or left (or the wait is over)."""

    def __init__(self, judge: GroupJudge, size: int) -> None:
        self.judge = judge
        self._size = size
        self._settled = 0
        self._members: list[_Member] = []
        self._fired = False
        self._timer: asyncio.TimerHandle | None = None

    def arrive(
        self, rubric: RubricVersion, fields: dict[str, str], step: int
    ) -> asyncio.Future[Judged | None] | None:
        """Join the call; None when it is started already (judge on your own)."""
        if self._fired:
            return None
        member = _Member(rubric, fields, step)
        self._members.append(member)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.judge.wait_seconds, self._fire)
        self._settle()
        return member.future

    def leave(self) -> None:
        """A member that will not arrive."""
        if not self._fired:
            self._settle()

    def _settle(self) -> None:
        self._settled += 1
        if self._settled >= self._size:
            self._fire()

    def _fire(self) -> None:
        if self._fired:
            return
        self._fired = True
        if self._timer is not None:
            self._timer.cancel()
        parts: dict[tuple[str, int, int, str, str], list[_Member]] = {}
        for m in self._members:
            key = (m.rubric.scope, m.rubric.version, m.step, *m.content[:2])
            parts.setdefault(key, []).append(m)
        for part in parts.values():
            if len(part) < 2:
                part[0].future.set_result(None)
            else:
                self.judge.start(part)


class Seat:
    """A batch item's place in its group's call."""

    def __init__(self, gathering: Gathering) -> None:
        self.gathering = gathering
        self.state = "open"

    def leave(self) -> None:
        """Give the place up (once; nothing after it arrived)."""
        if self.state == "open":
            self.state = "left"
            self.gathering.leave()

    async def judge(
        self,
        rubric: RubricVersion,
        fields: dict[str, str],
        step: int,
        own: Callable[[], Awaitable[Judged]],
    ) -> Judged:
        """The rollout's verdicts from its group's call, else from ``own`` (a call on it
        alone)."""
        self.state = "arrived"
        future = self.gathering.arrive(rubric, fields, step)
        # Shielded: a member's own timeout must not cancel the others' call.
        judged = None if future is None else await asyncio.shield(future)
        return await own() if judged is None else judged


_seat: ContextVar[Seat | None] = ContextVar("amaris_group_seat", default=None)
"""The seat of the batch item this task scores, if it is in a group."""


def plan_seats(groups: GroupJudge | None, items: Sequence[object]) -> dict[int, Seat]:
    """Seats for the requests among ``items`` (by index) that share a ``group_id`` and an
    explicit step (or both give none) with another; none when listwise is off."""
    if groups is None:
        return {}
    members: dict[tuple[str, int | None], list[int]] = {}
    for index, item in enumerate(items):
        if not isinstance(item, ScoreRequest) or item.rollout.group_id is None:
            continue
        metadata = item.metadata
        step = metadata.current_step if "current_step" in metadata.model_fields_set else None
        members.setdefault((item.rollout.group_id, step), []).append(index)
    seats: dict[int, Seat] = {}
    for indexes in members.values():
        if len(indexes) > 1:
            gathering = Gathering(groups, len(indexes))
            seats.update((i, Seat(gathering)) for i in indexes)
    return seats


@contextmanager
def seated(seat: Seat | None) -> Iterator[None]:
    """Within: this task scores the item of ``seat``; on exit the seat is left if unused."""
    token = _seat.set(seat)
    try:
        yield
    finally:
        _seat.reset(token)
        if seat is not None:
            seat.leave()


def take_seat(groups: GroupJudge | None, eligible: bool) -> Seat | None:
    """This task's seat, if it is to be judged with its group (``groups`` the scorer's own
    group judge, the rollout ``eligible``: not a trajectory); else the seat is left."""
    seat = _seat.get()
    if seat is None or seat.state != "open":
        return None
    if groups is None or not eligible or seat.gathering.judge is not groups:
        seat.leave()
        return None
    return seat


def leave_group() -> None:
    """This task's rollout will not (or no more) be judged with its group."""
    seat = _seat.get()
    if seat is not None:
        seat.leave()
