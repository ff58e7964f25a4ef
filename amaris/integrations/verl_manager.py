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

It imports verl, so it loads only in a verl environment (the other adapters do not).
"""

from __future__ import annotations

import numpy as np
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

from amaris.jsonfile import JSONDict

__all__ = ["AmarisRewardManager"]


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


class AmarisRewardManager(NaiveRewardManager):
    """verl's naive manager, with the prompt taken from ``raw_prompt`` when needed."""

    # verl's own per-sample payload (reward and extra info), passed through as is.
    async def run_single(self, data: DataProto) -> JSONDict:
        """Score the last sample of ``data`` as the naive manager does."""
        result: JSONDict = await super().run_single(with_prompt(data))
        return result
