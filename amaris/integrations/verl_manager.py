"""verl reward-loop manager that hands amaris the prompt from verl's own ``raw_prompt``.

verl's managers pass a reward function only ``data_source``, the response, the ground
truth and the dataset's ``extra_info``; datasets made by verl's own preprocessing scripts
put no prompt there. This manager is verl's ``naive`` one, except that a sample whose
``extra_info`` has no ``prompt`` (nor ``question``) gets its ``raw_prompt`` (the chat
messages verl rendered for the policy) as ``extra_info["prompt"]``. Use it with the
amaris reward function (:mod:`amaris.integrations.verl`)::

    reward.reward_manager.source=importlib
    reward.reward_manager.name=AmarisRewardManager
    reward.reward_manager.module.path=<this file>

**Padding.** With a colocated reward model (``reward.reward_model.enable`` without
``enable_resource_pool``) verl scores whole batches in
``RewardLoopManager.compute_rm_score``, which pads a batch to a multiple of
``reward.num_workers`` with copies of its first samples and drops their rewards. Each
copy goes to another reward worker (another Ray actor) exactly as its original, so
neither a worker nor amaris can tell it apart: amaris would score and log it as one more
rollout. This manager therefore refuses, when it starts, a configuration under which
verl pads (:func:`padding_problems`); without a reward model, or with its own resource
pool, verl scores each sample in its agent loop and never pads.

It imports verl, so it loads only in a verl environment (the other adapters do not).
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

from amaris.integrations.verl import VerlScore

__all__ = ["AmarisRewardManager", "padding_problems"]


def with_prompt(data: DataProto) -> DataProto:
    """The last sample of ``data`` (the one verl scores), its ``extra_info`` holding the
    prompt; ``data`` itself is left as it was."""
    last = data[-1:]
    infos = last.non_tensor_batch.get("extra_info")
    info = dict(infos[0]) if infos is not None and isinstance(infos[0], dict) else {}
    raw = last.non_tensor_batch.get("raw_prompt")
    if not (info.get("prompt") or info.get("question")) and raw is not None:
        info["prompt"] = [dict(message) for message in raw[0]]
    extra = np.empty(1, dtype=object)
    extra[0] = info
    last.non_tensor_batch["extra_info"] = extra
    return last


# verl's config is an OmegaConf DictConfig: attribute access, any shape.
def padding_problems(config: Any) -> list[str]:
    """Why verl would pad the batches it scores under ``config`` (none: it does not).

    verl pads in ``compute_rm_score`` only with a colocated reward model; there it scores
    the training batch (prompts per step x ``rollout.n`` samples), validation batches
    (which it first pads to ``rollout.agent.num_workers``) and, under REMAX, the greedy
    baselines (one per prompt). Each must be a multiple of ``reward.num_workers``.
    """
    model = config.reward.reward_model
    if not model.enable or model.enable_resource_pool:
        return []
    workers = int(config.reward.num_workers)
    rollout = config.actor_rollout_ref.rollout
    prompts = int(config.data.get("gen_batch_size") or config.data.train_batch_size)
    sizes = {
        "the training batch (data.train_batch_size x actor_rollout_ref.rollout.n)": prompts
        * int(rollout.n),
        "actor_rollout_ref.rollout.agent.num_workers (validation batches are padded to it)": int(
            rollout.agent.num_workers
        ),
    }
    if config.algorithm.adv_estimator == "remax":
        sizes["the REMAX baselines (data.train_batch_size)"] = prompts
    return [
        f"reward.num_workers={workers} does not divide {name}={size}"
        for name, size in sizes.items()
        if size % workers != 0
    ]


class SampleReward(TypedDict):
    """verl's answer for one sample (``NaiveRewardManager.run_single``): the reward and,
    for verl to log, what the reward function answered (the keys of
    :func:`amaris.integrations.verl.compute_score`, the function this manager is for)."""

    reward_score: float
    reward_extra_info: VerlScore


class AmarisRewardManager(NaiveRewardManager):
    """verl's naive manager, with the prompt taken from ``raw_prompt`` when needed."""

    # verl's own constructor arguments (its config, tokenizers, reward function), as is.
    def __init__(self, config: Any, tokenizer: Any, compute_score: Any, **kwargs: Any) -> None:
        """verl's naive manager; a configuration under which verl pads is refused.

        Raises:
            ValueError: verl would pad the batches it scores (:func:`padding_problems`).
        """
        problems = padding_problems(config)
        if problems:
            raise ValueError(
                "; ".join(problems) + ": with a colocated reward model verl pads each batch to a "
                "multiple of reward.num_workers with copies of its first samples, which amaris "
                "would score and log as rollouts of their own; set reward.num_workers to a "
                "divisor of these sizes"
            )
        super().__init__(config, tokenizer, compute_score, **kwargs)

    async def run_single(self, data: DataProto) -> SampleReward:
        """Score the last sample of ``data`` as the naive manager does."""
        result: SampleReward = await super().run_single(with_prompt(data))
        return result
