"""OpenRLHF reward function: ``--reward.remote_url /path/to/this/file.py`` (OpenRLHF 0.11).

OpenRLHF loads ``reward_func(queries, prompts, labels, **kwargs)`` from the file and
calls it for each sample (0.11 sends one per call); ``queries[i]`` is ``prompts[i]``
followed by the response (when OpenRLHF cut a long prompt, only the prompt's tail:
amaris then judges the whole prompt and what follows the tail), ``labels`` the
``--data.label_key`` column (the reference answer). It returns ``{"rewards", "scores",
"extra_logs"}`` as tensors: ``rewards`` for the advantages, ``scores`` (the same amaris
reward in [0, 1]) for dynamic filtering, ``extra_logs`` per-sample
``amaris_rubric_version`` and ``amaris_unscored`` (1.0 / 0.0) for the logger.

Configuration, from the environment of the Ray workers:

* ``AMARIS_URL`` (default ``http://127.0.0.1:8002``), ``AMARIS_API_KEY``;
* ``AMARIS_STEP``: the training step; unset, amaris logs the batch under the step it has
  open (set ``pipeline.rollouts_per_step`` = rollout.batch_size x rollout.n_samples_per_prompt);
* ``AMARIS_RETRY_SECONDS`` (default 60): how long unscored samples are retried.

**Judge outage.** One setting of the amaris server chooses: ``scoring.on_failure``.
Unless it is ``neutral``, a sample still unscored after the retries raises
:class:`RewardUnavailableError`, whose message names amaris's reason; OpenRLHF logs it
(``Failed to fetch reward from remote RM: ...``) and the training step then fails
(``reward_model_group is required when rewards are not precomputed``). With
``neutral``, ``scoring.neutral_score`` is the reward and ``extra_logs.amaris_unscored``
marks it.

The group of a sample (for the analyzer) is its prompt.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypedDict

from amaris.client import RewardUnavailableError
from amaris.integrations._remote import Target, env_step, get_rewards, optional_float
from amaris.models import GetRewardBody

if TYPE_CHECKING:  # the trainer's (see reward_func), not a dependency of amaris
    import torch

__all__ = ["RewardUnavailableError", "reward_func"]


class RewardPayload(TypedDict):
    """What OpenRLHF reads from a reward function, per sample: the reward for the
    advantages, the score for dynamic filtering, and values it logs."""

    rewards: torch.Tensor
    scores: torch.Tensor
    extra_logs: dict[str, torch.Tensor]


# labels: the --data.label_key column, any JSON; kwargs: what else OpenRLHF passes, unread.
def reward_func(
    queries: list[str], prompts: list[str], labels: list[Any] | None = None, **kwargs: Any
) -> RewardPayload:
    """amaris rewards of an OpenRLHF micro-batch (blocking); see the module docstring.

    Raises:
        RewardUnavailableError: samples unscored after the retries (amaris's
            ``scoring.on_failure`` is not ``neutral``).
        amaris.InvalidRequestError: amaris refused the batch (``fields`` names them).
    """
    target = Target.resolve(
        retry_seconds=optional_float("AMARIS_RETRY_SECONDS", os.environ.get("AMARIS_RETRY_SECONDS"))
    )
    body: GetRewardBody = {
        "query": list(queries),
        "prompts": list(prompts),
        "labels": list(labels) if labels is not None else None,
    }
    result = get_rewards(target, body, env_step())
    # torch is the trainer's (OpenRLHF runs on it), not a dependency of amaris: imported
    # here so that the adapter's module loads in the light client install.
    import torch

    rewards = torch.tensor(result.values())
    return {
        "rewards": rewards,
        "scores": rewards.clone(),
        "extra_logs": {
            "amaris_rubric_version": torch.tensor([float(v or 0) for v in result.rubric_versions]),
            "amaris_unscored": torch.tensor(
                [0.0 if s == "scored" else 1.0 for s in result.statuses]
            ),
        },
    }
