"""One amaris call per TRL batch, shared by the reward functions of
:mod:`amaris.integrations.trl`.

A batch goes to amaris as text (``/get_reward``: the prompt rendered, the completion after
it) or as agent trajectories (``/batch_score``: each sample's chat as ``rollout.messages``,
:func:`~amaris.integrations.episodes.episode_messages`, with the environment's outcome).
TRL calls every reward function on the same batch; :class:`SharedRewards` makes the call
once and each function reads its own key of the answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from amaris.client import MetadataBody, Rewards, RewardUnavailableError, RolloutBody, ScoreItem
from amaris.integrations._remote import Target, env_step, get_rewards_async, score_rollouts_async
from amaris.integrations.episodes import episode_messages
from amaris.integrations.text import Chat, completion_text, render
from amaris.models import GetRewardBody

Outcome = Callable[[Any], object]
"""Reads one sample's environment (an item of TRL's ``environments``, the instance
``environment_factory`` made for it): its verifiable signals as a JSON object (a dict), or
None."""
LogExtra = Callable[[str, list[Any]], None]
"""TRL's ``log_extra(column, values)``: a column of the completions table."""
LogMetric = Callable[[str, float], None]
"""TRL's ``log_metric(name, value)``."""

KEPT_BATCHES = 8
"""Batches whose answer is kept for the reward functions that have not read it yet."""


class TrainerState(Protocol):
    """TRL's ``trainer_state`` (transformers' ``TrainerState``): what amaris reads of it."""

    global_step: int


@dataclass(frozen=True)
class Options:
    """How the reward functions of one factory call amaris."""

    target: Target
    group_column: str | None
    reference_column: str | None
    high_level_goal: str | None = None
    model_size: str | None = None
    total_steps: int | None = None
    trajectories: bool | None = None
    """True: every batch as trajectories; False: every batch as text; None: a batch as
    trajectories when one of its completions calls a tool or holds a tool's answer."""
    outcome: Outcome | None = None


def _step(state: TrainerState | None) -> int | None:
    step = getattr(state, "global_step", None)
    return int(step) if step is not None else env_step()


def _column(values: Sequence[Any] | None, name: str | None, size: int) -> list[Any] | None:
    """The dataset column ``name`` (any JSON the dataset holds), None when absent."""
    if values is None:
        return None
    if len(values) != size:
        raise ValueError(f"dataset column {name!r} has {len(values)} values for {size} completions")
    return list(values)


def _label(value: object) -> str | None:
    """A reference answer as ``supplemental_context``: text as is, other JSON as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _calls_tools(completion: Chat) -> bool:
    """A conversational completion with a tool call or a tool's answer in it."""
    if isinstance(completion, str):
        return False
    messages = [completion] if isinstance(completion, Mapping) else completion
    return any(
        isinstance(m, Mapping) and (bool(m.get("tool_calls")) or m.get("role") == "tool")
        for m in messages
    )


@dataclass(frozen=True)
class Batch:
    """What TRL passed to a reward function, as amaris reads it."""

    prompts: Sequence[Chat]
    completions: Sequence[Chat]
    groups: list[str] | None
    labels: list[Any] | None
    step: int | None

    @classmethod
    def read(
        cls, options: Options, prompts: Sequence[Chat], completions: Sequence[Chat], kwargs: Any
    ) -> Batch:
        """The batch of one call: TRL's keyword arguments are the dataset's columns (by the
        dataset's own names), ``trainer_state`` and the log callbacks.

        Raises:
            ValueError: a column or the completions do not match the prompts in length.
        """
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        size = len(prompts)
        group_column, reference_column = options.group_column, options.reference_column
        groups = _column(kwargs.get(group_column) if group_column else None, group_column, size)
        labels = kwargs.get(reference_column) if reference_column else None
        return cls(
            prompts,
            completions,
            [str(g) for g in groups] if groups is not None else None,
            _column(labels, reference_column, size),
            _step(kwargs.get("trainer_state")),
        )

    def key(self) -> str:
        """What identifies the batch: its step and samples (an image part as its repr)."""
        samples = [self.step, self.prompts, self.completions, self.groups, self.labels]
        text = json.dumps(samples, sort_keys=True, ensure_ascii=False, default=repr)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _text_body(options: Options, batch: Batch) -> GetRewardBody:
    texts = [render(p) for p in batch.prompts]
    run = {
        "high_level_goal": options.high_level_goal,
        "model_size": options.model_size,
        "total_steps": options.total_steps,
    }
    return {
        "query": [t + completion_text(c) for t, c in zip(texts, batch.completions, strict=True)],
        "prompts": texts,
        "labels": batch.labels,
        "group_ids": batch.groups,
        "amaris_metadata": {k: v for k, v in run.items() if v is not None} or None,
    }


def _metadata(options: Options, step: int | None) -> MetadataBody:
    metadata: MetadataBody = {}
    if step is not None:
        metadata["current_step"] = step
    if options.high_level_goal is not None:
        metadata["high_level_goal"] = options.high_level_goal
    if options.model_size is not None:
        metadata["model_size"] = options.model_size
    if options.total_steps is not None:
        metadata["total_steps"] = options.total_steps
    return metadata


def _outcome(options: Options, environment: object) -> dict[Any, Any] | None:
    if options.outcome is None:
        return None
    value = options.outcome(environment)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"outcome must return a dict or None, got {type(value).__name__}")
    return dict(value)


def _items(
    options: Options, batch: Batch, environments: Sequence[object] | None
) -> list[ScoreItem]:
    """Each sample as a ``/batch_score`` item: its chat as ``rollout.messages``."""
    if environments is not None and len(environments) != len(batch.prompts):
        raise ValueError(f"{len(environments)} environments for {len(batch.prompts)} completions")
    metadata = _metadata(options, batch.step)
    items: list[ScoreItem] = []
    for i, (prompt, completion) in enumerate(zip(batch.prompts, batch.completions, strict=True)):
        rollout: RolloutBody = {
            "id": f"trl-{uuid.uuid4().hex[:16]}",
            "messages": episode_messages(prompt, completion),
        }
        if batch.labels is not None:
            rollout["supplemental_context"] = _label(batch.labels[i])
        if batch.groups is not None:
            rollout["group_id"] = batch.groups[i]
        outcome = _outcome(options, environments[i]) if environments is not None else None
        if outcome is not None:
            rollout["outcome"] = outcome
        items.append({"rollout": rollout, "metadata": metadata})
    return items


def _log(log_extra: object, log_metric: object, result: Rewards) -> None:
    versions = [v for v in result.rubric_versions if v is not None]
    if callable(log_extra):
        log_extra("amaris_status", list(result.statuses))
        log_extra("amaris_rubric_version", list(result.rubric_versions))
    if callable(log_metric):
        log_metric("amaris/unscored", float(sum(s != "scored" for s in result.statuses)))
        if versions:
            log_metric("amaris/rubric_version", float(max(versions)))


async def batch_rewards(options: Options, batch: Batch, kwargs: Any) -> Rewards:
    """The batch's rewards from amaris, logged through TRL's callbacks in ``kwargs``;
    unscored samples stay None (TRL leaves them out)."""
    as_trajectories = options.trajectories
    if as_trajectories is None:
        as_trajectories = any(_calls_tools(c) for c in batch.completions)
    try:
        if as_trajectories:
            items = _items(options, batch, kwargs.get("environments"))
            result = await score_rollouts_async(options.target, items)
        else:
            result = await get_rewards_async(options.target, _text_body(options, batch), batch.step)
    except RewardUnavailableError as error:
        result = error.result
    _log(kwargs.get("log_extra"), kwargs.get("log_metric"), result)
    return result


@dataclass
class _Entry:
    """A batch's call, and the reward functions that have read its answer."""

    task: asyncio.Task[Rewards]
    readers: set[str] = field(default_factory=set)


def _reusable(task: asyncio.Task[Rewards], loop: asyncio.AbstractEventLoop) -> bool:
    """A call that has not failed, and can be awaited on ``loop`` (or is over)."""
    if task.done():
        return not task.cancelled() and task.exception() is None
    return task.get_loop() is loop


class SharedRewards:
    """The amaris call that the reward functions of one factory share per batch.

    The first function TRL calls on a batch makes the call (and logs it through TRL's
    callbacks); the others read its answer. A function that reads a batch again (the same
    samples at the same step, another batch) makes a new call; a batch every function has
    read is forgotten, and at most :data:`KEPT_BATCHES` are kept.
    """

    def __init__(self, options: Options, readers: int) -> None:
        self.options = options
        self.readers = readers
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    async def rewards(
        self, reader: str, prompts: Sequence[Chat], completions: Sequence[Chat], kwargs: Any
    ) -> Rewards:
        """The batch's answer for the reward function ``reader``."""
        batch = Batch.read(self.options, prompts, completions, kwargs)
        key = batch.key()
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or reader in entry.readers or not _reusable(entry.task, loop):
                task = loop.create_task(batch_rewards(self.options, batch, kwargs))
                entry = self._entries[key] = _Entry(task)
                self._entries.move_to_end(key)
                while len(self._entries) > KEPT_BATCHES:
                    self._entries.popitem(last=False)
            entry.readers.add(reader)
            if len(entry.readers) >= self.readers:
                self._entries.pop(key, None)
        # Shielded: one reader cancelled does not cancel the call the others wait on.
        return await asyncio.shield(entry.task)
