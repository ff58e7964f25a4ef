"""TRL ``GRPOTrainer`` reward function: ``reward_funcs=[amaris_reward_func(...)]``.

The function is async (TRL runs async reward functions concurrently with the others)
with TRL's signature ``(prompts, completions, **kwargs) -> list[float | None]``:

* prompts and completions are plain strings or chat messages ``[{"role", "content"}]``;
* the step is ``kwargs["trainer_state"].global_step`` when TRL passes it, else
  ``AMARIS_STEP``, else the step amaris has open;
* the group of a sample (compared by the analyzer) is the ``group_column`` dataset column
  (default ``prompt_id``) when present, else the prompt;
* the reference answer is the ``reference_column`` dataset column (default ``answer``);
* an unscored sample is retried for ``retry_seconds``, then answered ``None``: TRL leaves
  it out of the reward sum, nothing is made up;
* with ``kwargs["log_extra"]`` / ``kwargs["log_metric"]`` it logs the columns
  ``amaris_status`` and ``amaris_rubric_version`` and the metrics ``amaris/unscored`` and
  ``amaris/rubric_version``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from amaris.client import Rewards, RewardUnavailableError
from amaris.integrations._remote import Target, env_step, get_rewards_async
from amaris.integrations.text import Chat, completion_text, render
from amaris.models import GetRewardBody

RewardFunc = Callable[..., Awaitable[list[float | None]]]


class TrainerState(Protocol):
    """TRL's ``trainer_state`` (transformers' ``TrainerState``): what amaris reads of it."""

    global_step: int


LogExtra = Callable[[str, list[Any]], None]
"""TRL's ``log_extra(column, values)``: a column of the completions table."""
LogMetric = Callable[[str, float], None]
"""TRL's ``log_metric(name, value)``."""


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


def _log(log_extra: LogExtra | None, log_metric: LogMetric | None, result: Rewards) -> None:
    versions = [v for v in result.rubric_versions if v is not None]
    if callable(log_extra):
        log_extra("amaris_status", list(result.statuses))
        log_extra("amaris_rubric_version", list(result.rubric_versions))
    if callable(log_metric):
        log_metric("amaris/unscored", float(sum(s != "scored" for s in result.statuses)))
        if versions:
            log_metric("amaris/rubric_version", float(max(versions)))


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
    """
    target = Target.resolve(url, api_key, timeout, retry_seconds)
    run = {"high_level_goal": high_level_goal, "model_size": model_size, "total_steps": total_steps}

    # TRL's keyword arguments: the batch's dataset columns (by name: the dataset's own),
    # ``trainer_state`` and the log callbacks; read one by one below.
    async def reward(
        prompts: Sequence[Chat], completions: Sequence[Chat], **kwargs: Any
    ) -> list[float | None]:
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        texts = [render(p) for p in prompts]
        size = len(texts)
        groups = _column(kwargs.get(group_column) if group_column else None, group_column, size)
        labels = kwargs.get(reference_column) if reference_column else None
        body: GetRewardBody = {
            "query": [t + completion_text(c) for t, c in zip(texts, completions, strict=True)],
            "prompts": texts,
            "labels": _column(labels, reference_column, size),
            "group_ids": [str(g) for g in groups] if groups is not None else None,
            "amaris_metadata": {k: v for k, v in run.items() if v is not None} or None,
        }
        try:
            result = await get_rewards_async(target, body, _step(kwargs.get("trainer_state")))
        except RewardUnavailableError as error:
            result = error.result  # unscored samples stay None: TRL leaves them out
        _log(kwargs.get("log_extra"), kwargs.get("log_metric"), result)
        return list(result.rewards)

    reward.__name__ = reward.__qualname__ = name
    return reward
