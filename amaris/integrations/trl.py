"""TRL ``GRPOTrainer`` reward functions: ``reward_funcs=[amaris_reward_func(...)]``, or
``reward_funcs=amaris_reward_funcs(...)`` for a reward per objective (multi-reward GRPO).

Each function is async (TRL runs async reward functions concurrently with the others)
with TRL's signature ``(prompts, completions, **kwargs) -> list[float | None]``:

* prompts and completions are plain strings or chat messages; a batch whose completions
  call tools (TRL's ``tools`` or ``environment_factory``: assistant ``tool_calls``, the
  tools' answers as ``tool`` messages) goes to amaris as agent trajectories, each sample's
  chat as ``rollout.messages`` (``/batch_score``), with ``outcome(environment)`` when
  given; any other batch as text (``/get_reward``); ``trajectories`` forces either;
* the step is ``kwargs["trainer_state"].global_step`` when TRL passes it, else
  ``AMARIS_STEP``, else the step amaris has open;
* the group of a sample (compared by the analyzer) is the ``group_column`` dataset column
  (default ``prompt_id``) when present, else the prompt;
* the reference answer is the ``reference_column`` dataset column (default ``answer``);
* an unscored sample is retried for ``retry_seconds``, then answered ``None``: TRL leaves
  it out of that reward function (and out of training when every function says ``None``),
  nothing is made up;
* with ``kwargs["log_extra"]`` / ``kwargs["log_metric"]`` it logs the columns
  ``amaris_status`` and ``amaris_rubric_version`` and the metrics ``amaris/unscored`` and
  ``amaris/rubric_version`` (once per batch).

The functions of one :func:`amaris_reward_funcs` share one amaris call per batch
(:class:`~amaris.integrations.trl_rewards.SharedRewards`): one reward per sample, each
function reading its key of the sample's reward vector.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from amaris.client import Rewards
from amaris.integrations._remote import Target
from amaris.integrations.episodes import reward_keys
from amaris.integrations.text import Chat
from amaris.integrations.trl_rewards import (
    LogExtra,
    LogMetric,
    Options,
    Outcome,
    SharedRewards,
    TrainerState,
)

__all__ = [
    "LogExtra",
    "LogMetric",
    "Outcome",
    "RewardFunc",
    "TrainerState",
    "amaris_reward_func",
    "amaris_reward_funcs",
]

RewardFunc = Callable[..., Awaitable[list[float | None]]]

SCALAR = ""
"""The reader name of the scalar reward function (the reward keys are never empty)."""


def _values(result: Rewards, key: str) -> list[float | None]:
    """The scalar rewards, or each sample's ``key`` of its reward vector (None unscored).

    Raises:
        ValueError: a scored sample's vector has no ``key`` (not a reward key of the
            rubric), or the server sends no vectors.
    """
    if key == SCALAR:
        return list(result.rewards)
    vectors = result.reward_vectors
    if vectors is None:
        if any(r is not None for r in result.rewards):
            raise ValueError(f"amaris sent no reward vectors: no {key!r} reward to give")
        return [None] * len(result.rewards)
    values: list[float | None] = []
    for vector in vectors:
        if vector is not None and key not in vector:
            raise ValueError(
                f"reward key {key!r} is not in amaris's reward vector (keys: {sorted(vector)})"
            )
        value = vector.get(key) if vector is not None else None
        values.append(float(value) if value is not None else None)
    return values


def _reward_func(shared: SharedRewards, key: str, name: str) -> RewardFunc:
    # TRL's keyword arguments: the batch's dataset columns (by name: the dataset's own),
    # ``trainer_state``, the log callbacks and ``environments``; read in trl_rewards.
    async def reward(
        prompts: Sequence[Chat], completions: Sequence[Chat], **kwargs: Any
    ) -> list[float | None]:
        return _values(await shared.rewards(key, prompts, completions, kwargs), key)

    reward.__name__ = reward.__qualname__ = name
    return reward


def amaris_reward_func(
    url: str | None = None,
    *,
    api_key: str | None = None,
    name: str = "amaris",
    group_column: str | None = "prompt_id",
    reference_column: str | None = "answer",
    high_level_goal: str | None = None,
    model_size: str | None = None,
    total_steps: int | None = None,
    timeout: float = 600.0,
    retry_seconds: float = 30.0,
    trajectories: bool | None = None,
    outcome: Outcome | None = None,
) -> RewardFunc:
    """An async GRPO reward function scoring with the amaris server at ``url``.

    Args:
        url: the server; default ``AMARIS_URL``, else ``http://127.0.0.1:8002``.
        api_key: its bearer key; default ``AMARIS_API_KEY``.
        name: ``__name__`` of the function: TRL's reward column and metric name.
        group_column: dataset column holding the prompt id.
        reference_column: dataset column holding the reference answer.
        high_level_goal, model_size, total_steps: the run, for the analyzer.
        timeout: seconds per HTTP request.
        retry_seconds: how long unscored samples are retried before answering None.
        trajectories: True: every batch as agent trajectories (``rollout.messages``);
            False: every batch as text; None: a batch as trajectories when a completion
            calls a tool or holds a tool's answer.
        outcome: reads a sample's environment (TRL's ``environments``, with
            ``environment_factory``): its verifiable signals, sent as ``rollout.outcome``
            with a trajectory.
    """
    options = Options(
        Target.resolve(url, api_key, timeout, retry_seconds),
        group_column,
        reference_column,
        high_level_goal,
        model_size,
        total_steps,
        trajectories,
        outcome,
    )
    return _reward_func(SharedRewards(options, readers=1), SCALAR, name)


def amaris_reward_funcs(
    url: str | None = None,
    *,
    anchor_ids: Sequence[str] = (),
    scalar: bool = True,
    api_key: str | None = None,
    name: str = "amaris",
    group_column: str | None = "prompt_id",
    reference_column: str | None = "answer",
    high_level_goal: str | None = None,
    model_size: str | None = None,
    total_steps: int | None = None,
    timeout: float = 600.0,
    retry_seconds: float = 30.0,
    trajectories: bool | None = None,
    outcome: Outcome | None = None,
) -> list[RewardFunc]:
    """GRPO reward functions for TRL's multi-reward GRPO (``reward_funcs=[...]`` with
    ``reward_weights`` in that order): the scalar reward (named ``name``, unless
    ``scalar`` is False), then one per reward key, ``anchors``, ``adaptive`` and each of
    ``anchor_ids`` (named ``{name}_{key}``). They share one amaris call per batch.

    A key's value is None where the sample is unscored or the key is null (``adaptive``
    while the rubric has no adaptive criteria): TRL leaves the sample out of that function.
    The other arguments are :func:`amaris_reward_func`'s.

    Raises:
        ValueError: a key is given twice.
        TypeError: ``anchor_ids`` is one string, not a list of ids.
    """
    if isinstance(anchor_ids, str):
        raise TypeError(f"anchor_ids must be a list of ids, got the string {anchor_ids!r}")
    keys = reward_keys(list(anchor_ids))
    if len(set(keys)) != len(keys):
        raise ValueError(f"reward keys must be distinct, got {keys}")
    options = Options(
        Target.resolve(url, api_key, timeout, retry_seconds),
        group_column,
        reference_column,
        high_level_goal,
        model_size,
        total_steps,
        trajectories,
        outcome,
    )
    readers = [SCALAR] if scalar else []
    readers += keys
    shared = SharedRewards(options, readers=len(readers))
    return [_reward_func(shared, r, name if r == SCALAR else f"{name}_{r}") for r in readers]
