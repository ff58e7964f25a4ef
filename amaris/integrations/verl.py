"""verl reward function: ``reward.custom_reward_function.path`` pointing at this module.

verl (0.9+) reads the function from ``reward.custom_reward_function`` (``path``, ``name``,
``reward_kwargs``); the top-level ``custom_reward_function`` of older versions is
ignored by ``main_ppo`` and moved there by ``fully_async_main`` (docs/integrations.md).
Its reward managers call ``compute_score(data_source, solution_str,
ground_truth, extra_info, **kwargs)`` per sample (and await :func:`compute_score_async`),
with ``reward_kwargs`` as keyword arguments. Every answer has the same keys, so any
manager can batch them: ``{"score": float, "rubric_version": int, "status": "scored" |
"unscored" | "error", "reason": str, "unscored": 0.0 | 1.0}``; verl logs the extra keys.

* **Prompt**: ``extra_info["prompt"]`` (text, or chat messages ``[{"role", "content"}]``),
  else ``extra_info["question"]``. verl's managers pass no other field of the sample:
  with :class:`amaris.integrations.verl_manager.AmarisRewardManager` the prompt is
  verl's own ``raw_prompt`` when ``extra_info`` has none. Missing: ValueError.
* **Group** (the analyzer compares responses to one prompt): ``extra_info["uid"]``, else
  ``data_source`` + ``extra_info["index"]``, else the prompt text.
* **Step**: ``reward_kwargs.step``, else ``extra_info["global_steps"]`` (set by reward
  managers that forward the trainer's step), else ``AMARIS_STEP``, else the step amaris
  has open (use ``pipeline.rollouts_per_step`` = train_batch_size x rollout.n).
* **Server**: ``reward_kwargs.url`` / ``api_key``, else ``AMARIS_URL`` / ``AMARIS_API_KEY``.
* **Judge outage**: while amaris answers 503 (no verdict yet) the sample is retried for
  ``retry_seconds`` (default 60); then, by default, :class:`RewardUnavailableError`
  (or :class:`amaris.ServerUnavailableError` when amaris is unreachable) is raised and
  the manager decides (naive, dapo: the training step fails; rate_limited: verl makes it
  a 0.0 reward, see docs/integrations.md). With ``reward_kwargs.unscored_score`` that
  value is returned instead, ``status`` ``"unscored"`` (judge) or ``"error"`` (amaris
  unreachable) and ``reason`` saying why. Under ``scoring.on_failure: neutral`` amaris
  answers its neutral score, also as ``unscored``.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from amaris.client import AmarisError, Rewards, RewardUnavailableError, ServerUnavailableError
from amaris.integrations._remote import (
    Target,
    env_step,
    get_rewards,
    get_rewards_async,
    optional_float,
)
from amaris.integrations.text import Chat, render
from amaris.models import GetRewardBody

__all__ = ["RewardUnavailableError", "compute_score", "compute_score_async"]


class ExtraInfo(TypedDict, total=False):
    """A sample's ``extra_info`` (a column of the trainer's dataset): the fields amaris
    reads. The dataset's other fields, and those verl adds (``num_turns``...), are left
    alone."""

    prompt: Chat
    question: Chat
    uid: str | int
    """The sample's group: the prompt's id (verl's ``uid``)."""
    index: int | str
    """The row's index in its dataset: ``<data_source>/<index>`` names the group."""
    global_steps: int


class RewardKwargs(TypedDict, total=False):
    """verl's ``reward_kwargs`` (``reward.custom_reward_function.reward_kwargs``) that amaris
    reads; verl may pass others (``reward_router_address``...), which are left alone."""

    step: int
    url: str
    api_key: str
    timeout: float
    retry_seconds: float
    unscored_score: float
    high_level_goal: str
    model_size: str
    total_steps: int
    other_context: str


def _run(kwargs: RewardKwargs) -> dict[str, str | int] | None:
    """The run's description for the analyzer (``amaris_metadata``), None if none is set."""
    run = {
        "high_level_goal": kwargs.get("high_level_goal"),
        "model_size": kwargs.get("model_size"),
        "total_steps": kwargs.get("total_steps"),
        "other_context": kwargs.get("other_context"),
    }
    return {key: value for key, value in run.items() if value is not None} or None


def _prompt(extra_info: ExtraInfo) -> str:
    for value in (extra_info.get("prompt"), extra_info.get("question")):
        if value:
            return render(value)
    raise ValueError(
        "verl extra_info needs the prompt: set extra_info['prompt'] (or 'question') in your "
        "dataset preprocessing, or use amaris.integrations.verl_manager.AmarisRewardManager, "
        "which takes it from verl's raw_prompt"
    )


def _group(data_source: str, extra_info: ExtraInfo) -> str | None:
    if extra_info.get("uid") is not None:
        return str(extra_info["uid"])
    if extra_info.get("index") is not None:
        return f"{data_source}/{extra_info['index']}"
    return None


def _step(extra_info: ExtraInfo, kwargs: RewardKwargs) -> int | None:
    for value in (kwargs.get("step"), extra_info.get("global_steps")):
        if value is not None:
            return int(value)
    return env_step()


def _request(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: ExtraInfo | None,
    kwargs: RewardKwargs,
) -> tuple[Target, GetRewardBody, int | None]:
    info: ExtraInfo = extra_info or {}
    prompt = _prompt(info)
    group = _group(data_source, info)
    body: GetRewardBody = {
        "query": [prompt + solution_str],
        "prompts": [prompt],
        "labels": [ground_truth],
        "group_ids": [group] if group is not None else None,
        "amaris_metadata": _run(kwargs),
    }
    target = Target.resolve(
        kwargs.get("url"), kwargs.get("api_key"), kwargs.get("timeout"), kwargs.get("retry_seconds")
    )
    return target, body, _step(info, kwargs)


NEUTRAL_REASON = "amaris answered its neutral score (scoring.on_failure: neutral)"


class VerlScore(TypedDict):
    """What a verl reward function returns for a sample: ``score`` and values it logs."""

    score: float
    rubric_version: int
    status: str
    reason: str
    unscored: float


def _result(result: Rewards) -> VerlScore:
    status = result.statuses[0]
    return {
        "score": result.values()[0],
        "rubric_version": result.rubric_versions[0] or 0,
        "status": status,
        "reason": "" if status == "scored" else NEUTRAL_REASON,
        "unscored": 0.0 if status == "scored" else 1.0,
    }


def _fallback(error: AmarisError, kwargs: RewardKwargs) -> VerlScore:
    """``unscored_score`` for a judge outage (or unreachable amaris), else ``error`` again."""
    value = optional_float("unscored_score", kwargs.get("unscored_score"))
    if value is None:
        raise error
    unscored = isinstance(error, RewardUnavailableError)
    version = error.result.rubric_versions[0] if isinstance(error, RewardUnavailableError) else None
    return {
        "score": value,
        "rubric_version": version or 0,
        "status": "unscored" if unscored else "error",
        "reason": str(error),
        "unscored": 1.0,
    }


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: ExtraInfo | None = None,
    **kwargs: Unpack[RewardKwargs],
) -> VerlScore:
    """The amaris reward of one verl sample (blocking); see the module docstring.

    Raises:
        RewardUnavailableError: unscored after the retry budget, without ``unscored_score``.
        amaris.ServerUnavailableError: amaris unreachable, without ``unscored_score``.
        amaris.InvalidRequestError: amaris refused the sample (always raised).
        ValueError: ``extra_info`` has no prompt.
    """
    target, body, step = _request(data_source, solution_str, ground_truth, extra_info, kwargs)
    try:
        return _result(get_rewards(target, body, step))
    except (RewardUnavailableError, ServerUnavailableError) as error:
        return _fallback(error, kwargs)


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: ExtraInfo | None = None,
    **kwargs: Unpack[RewardKwargs],
) -> VerlScore:
    """Async :func:`compute_score`, for verl's reward loop."""
    target, body, step = _request(data_source, solution_str, ground_truth, extra_info, kwargs)
    try:
        return _result(await get_rewards_async(target, body, step))
    except (RewardUnavailableError, ServerUnavailableError) as error:
        return _fallback(error, kwargs)
