"""verl reward function: ``reward.custom_reward_function.path`` pointing at this module.

verl (0.9+) reads the function from ``reward.custom_reward_function`` (``path``, ``name``,
``reward_kwargs``); the top-level ``custom_reward_function`` of older versions is
ignored by ``main_ppo`` and moved there by ``fully_async_main`` (docs/integrations.md).
Its reward managers call ``compute_score(data_source, solution_str,
ground_truth, extra_info, **kwargs)`` per sample (and await :func:`compute_score_async`),
with ``reward_kwargs`` as keyword arguments. Every answer has the same keys, so any
manager can batch them: ``{"score": float, "rubric_version": int, "status": "scored" |
"unscored" | "error", "reason": str, "unscored": 0.0 | 1.0, "anchors": float | None,
"adaptive": float | None}`` and one key per id of ``reward_kwargs.anchor_ids`` (the
reward vector: docs/integrations.md); verl logs the extra keys and GDPO reads the ones
``algorithm.gdpo_reward_keys`` names.

* **Agent episodes**: a sample whose ``extra_info["extras"]`` holds ``messages`` (what
  :class:`amaris.integrations.verl_manager.AmarisToolAgentLoop` records) is scored as a
  trajectory (``POST /batch_score``): the loop's chat with its tool calls and results,
  ``finish_reason`` and ``outcome`` as recorded, ``extra_info["num_turns"]`` in the
  rollout's metadata; ``solution_str`` is not read. Any other sample is a prompt and
  ``solution_str`` (``POST /get_reward``).
* **Prompt** (a text sample): ``extra_info["prompt"]`` (text, or chat messages
  ``[{"role", "content"}]``), else ``extra_info["question"]``. verl's managers pass no
  other field of the sample: with
  :class:`amaris.integrations.verl_manager.AmarisRewardManager` the prompt is verl's own
  ``raw_prompt`` when ``extra_info`` has none. Missing: ValueError.
* **Group** (the analyzer compares responses to one prompt): ``extra_info["uid"]``, else
  ``data_source`` + ``extra_info["index"]``, else the prompt text.
* **Step**: ``reward_kwargs.step``, else ``extra_info["global_steps"]`` (set by reward
  managers that forward the trainer's step), else ``AMARIS_STEP``, else the step amaris
  has open (use ``pipeline.rollouts_per_step`` = train_batch_size x rollout.n).
* **Server**: ``reward_kwargs.url`` / ``api_key``, else ``AMARIS_URL`` / ``AMARIS_API_KEY``.
* **Judge outage**: while amaris has no verdict for the sample, it is retried for
  ``retry_seconds`` (default 60); then, by default, :class:`RewardUnavailableError`
  (or :class:`amaris.ServerUnavailableError` when amaris is unreachable) is raised and
  the manager decides (naive, dapo: the training step fails; rate_limited: verl makes it
  a 0.0 reward, see docs/integrations.md). With ``reward_kwargs.unscored_score`` that
  value is returned instead, ``status`` ``"unscored"`` (judge) or ``"error"`` (amaris
  unreachable) and ``reason`` saying why. Under ``scoring.on_failure: neutral`` amaris
  answers its neutral score, also as ``unscored``. An unscored sample's reward-vector keys
  all hold its ``score``: no criterion was judged.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, Unpack, cast

from amaris.client import (
    AmarisError,
    MetadataBody,
    Rewards,
    RewardUnavailableError,
    RolloutBody,
    ScoreItem,
    ServerUnavailableError,
)
from amaris.integrations._remote import (
    Target,
    env_step,
    get_rewards,
    get_rewards_async,
    optional_float,
    score_rollouts,
    score_rollouts_async,
)
from amaris.integrations.episodes import FIXED_KEYS, episode_messages, reward_keys
from amaris.integrations.text import Chat, ChatMessage, render
from amaris.jsonfile import JSONDict
from amaris.models import GetRewardBody, RewardVector
from amaris.trajectory import FinishReason

__all__ = ["RewardUnavailableError", "compute_score", "compute_score_async"]


class Episode(TypedDict, total=False):
    """An agent episode as :class:`~amaris.integrations.verl_manager.AmarisToolAgentLoop`
    records it in the loop's ``extra_fields["extras"]``; verl's reward managers hand those
    fields to the reward function in ``extra_info``."""

    messages: list[ChatMessage]
    """The loop's chat: the prompt, then each assistant turn (tool calls with arguments
    parsed or as text) and each tool result."""
    finish_reason: str
    """``stop``, ``length`` or ``tool_limit`` (verl's loop ends no other way)."""
    outcome: JSONDict
    """The environment's verifiable signals, when a tool of the loop set them."""


class ExtraInfo(TypedDict, total=False):
    """A sample's ``extra_info`` (a column of the trainer's dataset, plus the agent loop's
    fields): the fields amaris reads. The others are left alone."""

    prompt: Chat
    question: Chat
    uid: str | int
    """The sample's group: the prompt's id (verl's ``uid``)."""
    index: int | str
    """The row's index in its dataset: ``<data_source>/<index>`` names the group."""
    global_steps: int
    extras: Episode
    num_turns: int
    """The episode's turns (user, assistant and tool), set by verl's reward managers."""


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
    anchor_ids: Sequence[str] | str
    """The anchor criteria ids (``A1``...) to answer a reward-vector key for: a list, or
    ids separated by commas. Every answer has them, so name them beside ``anchors`` and
    ``adaptive`` in ``algorithm.gdpo_reward_keys``."""


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
    return _target(kwargs), body, _step(info, kwargs)


def _target(kwargs: RewardKwargs) -> Target:
    return Target.resolve(
        kwargs.get("url"), kwargs.get("api_key"), kwargs.get("timeout"), kwargs.get("retry_seconds")
    )


def _episode(extra_info: ExtraInfo | None) -> Episode | None:
    """The agent episode the sample is, when its agent loop recorded one."""
    extras = (extra_info or {}).get("extras")
    # verl's fields, any shape: a loop of the user's own may set "extras" to anything
    if isinstance(extras, Mapping) and extras.get("messages"):
        return extras
    return None


def _label(value: Any) -> str | None:
    """A ground truth as ``supplemental_context``: text as is, other JSON encoded."""
    if value is None or isinstance(value, str):
        return value
    value = value.tolist() if hasattr(value, "tolist") else value  # numpy, from parquet
    return json.dumps(value, ensure_ascii=False, default=str)


def _trajectory(
    data_source: str,
    ground_truth: Any,
    info: ExtraInfo,
    episode: Episode,
    kwargs: RewardKwargs,
) -> tuple[Target, ScoreItem]:
    """The ``/batch_score`` item of an agent episode, and where to send it."""
    rollout: RolloutBody = {
        "id": f"verl-{uuid.uuid4().hex[:16]}",
        "messages": episode_messages(episode["messages"]),
        "supplemental_context": _label(ground_truth),
    }
    stored: JSONDict = {"data_source": str(data_source)}
    if info.get("num_turns") is not None:
        stored["num_turns"] = int(info["num_turns"])
    rollout["metadata"] = stored
    if episode.get("finish_reason"):
        # verl's own value; amaris refuses one outside its five, naming the field
        rollout["finish_reason"] = cast(FinishReason, str(episode["finish_reason"]))
    if episode.get("outcome"):
        rollout["outcome"] = dict(episode["outcome"])
    group = _group(data_source, info)
    if group is not None:
        rollout["group_id"] = group
    metadata = cast(MetadataBody, _run(kwargs) or {})
    step = _step(info, kwargs)
    if step is not None:
        metadata["current_step"] = step
    return _target(kwargs), {"rollout": rollout, "metadata": metadata}


def _anchor_ids(value: Sequence[str] | str | None) -> list[str]:
    """``reward_kwargs.anchor_ids`` as a list (verl passes Hydra's list as a sequence).

    Raises:
        ValueError: an entry is not an anchor id.
    """
    if value is None or value == "":
        return []
    names = value.split(",") if isinstance(value, str) else list(value)
    ids = [str(name).strip() for name in names]
    wrong = [i for i in ids if not (i[:1] == "A" and i[1:].isdigit())]
    if wrong:
        raise ValueError(f"anchor_ids holds anchor criterion ids (A1, A2...), got {wrong}")
    return ids


NEUTRAL_REASON = "amaris answered its neutral score (scoring.on_failure: neutral)"


VerlScore = dict[str, float | int | str | None]
"""What the reward function returns for a sample: ``score`` and the values verl logs
beside it (the module docstring), among them the reward-vector keys."""


def _vector(keys: list[str], scored: bool, score: float, vector: RewardVector | None) -> VerlScore:
    """The reward-vector keys of an answer: an unscored one's all hold its ``score``.

    Raises:
        ValueError: a scored answer has no value for an id of ``anchor_ids``.
    """
    if not scored:
        return dict.fromkeys(keys, score)
    values: VerlScore = {key: (vector or {}).get(key) for key in FIXED_KEYS}
    for key in keys[len(FIXED_KEYS) :]:
        if vector is None or key not in vector:
            raise ValueError(
                f"anchor_ids names {key!r}, which amaris's answer has no reward for "
                f"(it has {sorted(vector or {})}): name the anchor ids of its rubric"
            )
        values[key] = vector[key]
    return values


def _result(result: Rewards, keys: list[str]) -> VerlScore:
    status = result.statuses[0]
    score = result.values()[0]
    vector = result.reward_vectors[0] if result.reward_vectors else None
    return {
        "score": score,
        "rubric_version": result.rubric_versions[0] or 0,
        "status": status,
        "reason": "" if status == "scored" else NEUTRAL_REASON,
        "unscored": 0.0 if status == "scored" else 1.0,
        **_vector(keys, status == "scored", score, vector),
    }


def _fallback(error: AmarisError, kwargs: RewardKwargs, keys: list[str]) -> VerlScore:
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
        **_vector(keys, False, value, None),
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
        ValueError: a text sample's ``extra_info`` has no prompt; ``anchor_ids`` is wrong.
    """
    keys = reward_keys(_anchor_ids(kwargs.get("anchor_ids")))
    episode = _episode(extra_info)
    try:
        if episode is not None:
            target, item = _trajectory(data_source, ground_truth, extra_info or {}, episode, kwargs)
            result = score_rollouts(target, [item])
        else:
            target, body, step = _request(
                data_source, solution_str, ground_truth, extra_info, kwargs
            )
            result = get_rewards(target, body, step)
    except (RewardUnavailableError, ServerUnavailableError) as error:
        return _fallback(error, kwargs, keys)
    return _result(result, keys)


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: ExtraInfo | None = None,
    **kwargs: Unpack[RewardKwargs],
) -> VerlScore:
    """Async :func:`compute_score`, for verl's reward loop."""
    keys = reward_keys(_anchor_ids(kwargs.get("anchor_ids")))
    episode = _episode(extra_info)
    try:
        if episode is not None:
            target, item = _trajectory(data_source, ground_truth, extra_info or {}, episode, kwargs)
            result = await score_rollouts_async(target, [item])
        else:
            target, body, step = _request(
                data_source, solution_str, ground_truth, extra_info, kwargs
            )
            result = await get_rewards_async(target, body, step)
    except (RewardUnavailableError, ServerUnavailableError) as error:
        return _fallback(error, kwargs, keys)
    return _result(result, keys)
