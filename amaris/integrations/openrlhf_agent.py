"""OpenRLHF agent episodes scored by amaris: ``--train.agent_func_path <file>.py`` (OpenRLHF 0.11).

OpenRLHF loads the class ``AgentExecutor`` from the file (a subclass of its
``AgentExecutorBase``, made without arguments). Its ``MultiTurnAgentExecutor`` makes one
agent instance per sample: ``reset({"observation": prompt, "label": label})``, then, after
each generation, ``step({"observation_text", "action_text", "label", "sampling_params"})``,
which returns ``rewards`` (a tensor; the episode's reward is their sum), ``scores``,
``environment_feedback`` (text appended to the policy's context), ``done``,
``sampling_params`` and ``extra_logs`` (the last step's are logged). The episode also ends
when its tokens reach ``max_len``, without a ``done`` step.

:class:`AmarisAgentInstance` keeps the episode as chat messages (the prompt as a user
message, each action as an assistant message, each environment answer as a user or tool
message: :func:`~amaris.integrations.episodes.episode_messages`) and asks
:meth:`~AmarisAgentInstance.environment` what to answer. When the episode is done it calls
amaris once (``POST /batch_score`` with the trajectory, its outcome and finish reason, the
label as the reference answer: :func:`~amaris.integrations._remote.score_rollouts_async`)
and returns amaris's reward, and ``extra_logs``: the reward vector, one entry per key
(``amaris_anchors``, ``amaris_adaptive``, ``amaris_<anchor id>`` for each of
:attr:`~AmarisAgentInstance.anchor_ids`; NaN where amaris has no value),
``amaris_rubric_version`` and ``amaris_unscored`` (1.0 / 0.0). :class:`AmarisAgentExecutor`
runs OpenRLHF's executor and scores an episode that ran out of tokens (finish reason
``length``); the instance refuses to run under another executor, whose samples would keep a
reward of 0 that amaris never gave.

A file to point OpenRLHF at::

    class Calculator(AmarisAgentInstance):
        anchor_ids = ("A1",)

        async def environment(self, action: str) -> Feedback:
            ...

    class AgentExecutor(AmarisAgentExecutor):
        def __init__(self) -> None:
            super().__init__(Calculator)

Configuration, from the environment of the Ray workers, as for the reward function
(:mod:`amaris.integrations.openrlhf`): ``AMARIS_URL``, ``AMARIS_API_KEY``, ``AMARIS_STEP``
(unset: the step amaris has open), ``AMARIS_RETRY_SECONDS`` (default 60).

**Judge outage.** As for the reward function: an episode still unscored after the retries
raises :class:`~amaris.client.RewardUnavailableError` naming amaris's reason, out of the
rollout, and the training step fails (OpenRLHF's agent path has no way to leave a sample
out). With the server's ``scoring.on_failure: neutral``, ``scoring.neutral_score`` is the
reward, flagged ``amaris_unscored = 1``.

It imports OpenRLHF and torch, so it loads only in an OpenRLHF environment.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from amaris.client import (
    MetadataBody,
    Rewards,
    RewardUnavailableError,
    RolloutBody,
    ScoreItem,
)
from amaris.integrations._remote import Target, env_step, optional_float, score_rollouts_async
from amaris.integrations.episodes import episode_messages, reward_keys
from amaris.integrations.text import Chat, ChatMessage
from amaris.jsonfile import JSONDict
from amaris.trajectory import FinishReason

__all__ = [
    "AmarisAgentExecutor",
    "AmarisAgentInstance",
    "Feedback",
    "RewardUnavailableError",
]


@dataclass(frozen=True)
class Feedback:
    """The environment's answer to one action of the policy."""

    text: str = ""
    """Appended to the policy's context (OpenRLHF's ``environment_feedback``), chat
    template tokens and all."""
    done: bool = False
    """The episode ends here: amaris scores it."""
    role: Literal["user", "tool"] = "user"
    """The message amaris sees this answer as."""
    content: str | None = None
    """That message's text (None: ``text``); no message when it is empty."""
    outcome: JSONDict | None = None
    """Verifiable signals (``tests_passed``...), merged into the episode's ``outcome``."""
    finish_reason: FinishReason | None = None
    """Why the episode ended, when ``done`` (None: ``stop``)."""
    # The next generation's vLLM SamplingParams (OpenRLHF's object); None: unchanged.
    sampling_params: Any = None


@dataclass(frozen=True)
class Scored:
    """What OpenRLHF reads of a scored episode."""

    reward: float
    extra_logs: dict[str, float]


_EPISODES: ContextVar[list[AmarisAgentInstance] | None] = ContextVar(
    "amaris_openrlhf_episodes", default=None
)
"""The instance :class:`AmarisAgentExecutor` is running in this task (one per sample)."""


def _label(value: Any) -> str | None:
    """The label (``--data.label_key``, any JSON) as the reference answer: as ``/get_reward``
    takes it."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class AmarisAgentInstance(AgentInstanceBase):
    """One sample's episode, scored by amaris when it ends; subclass it and write
    :meth:`environment` (by default the episode ends after the first action)."""

    anchor_ids: Sequence[str] = ()
    """The rubric's anchor ids to log a reward for (``A1``...: anchors never change id);
    ``anchors`` and ``adaptive`` are logged always. Every sample logs the same keys."""

    def __init__(self) -> None:
        running = _EPISODES.get()
        if running is None:
            raise RuntimeError(
                f"{type(self).__name__} runs under amaris's AmarisAgentExecutor (make the "
                "file's AgentExecutor a subclass of it): under another executor an episode "
                "cut at max_len would keep a reward amaris never gave"
            )
        running.append(self)
        self.prompt = ""
        self.label: Any = None
        self.turns: list[ChatMessage] = []
        self.outcome: JSONDict = {}
        self.scored: Scored | None = None

    # OpenRLHF's own signature: its state and result dicts are its JSON, not ours to type.
    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Start the episode from OpenRLHF's ``{"observation": prompt, "label": label}``."""
        self.prompt = str(states["observation"])
        self.label = states.get("label")
        return states

    async def environment(self, action: str) -> Feedback:
        """The environment's answer to ``action`` (the policy's text of this turn; the
        episode so far is :attr:`turns`, after :attr:`prompt`; :attr:`label` is the
        sample's label). By default: done."""
        return Feedback(done=True)

    def prompt_messages(self) -> Chat:
        """The episode's prompt as amaris sees it: by default OpenRLHF's prompt text (chat
        template applied, when it is) as one user message."""
        return self.prompt

    # OpenRLHF's own signature (AgentInstanceBase.step): its JSON in and out.
    async def step(self, state_dict: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Record the action and the environment's answer; at the end, amaris's reward.

        Raises:
            RewardUnavailableError: amaris gave the episode no reward within the retries.
            amaris.InvalidRequestError: amaris refused the episode (its message names the
                field).
        """
        action = str(state_dict["action_text"])
        self.turns.append({"role": "assistant", "content": action})
        feedback = await self.environment(action)
        content = feedback.text if feedback.content is None else feedback.content
        if content:
            self.turns.append({"role": feedback.role, "content": content})
        if feedback.outcome:
            self.outcome.update(feedback.outcome)
        scored = await self.finish(feedback.finish_reason or "stop") if feedback.done else None
        reward = torch.tensor(scored.reward if scored else 0.0)
        return {
            "rewards": reward,
            "scores": reward.clone(),
            "environment_feedback": feedback.text,
            "done": feedback.done,
            "sampling_params": feedback.sampling_params,
            "extra_logs": scored.extra_logs if scored else {},
        }

    async def finish(self, finish_reason: FinishReason) -> Scored:
        """Score the episode (once): its reward and the values OpenRLHF logs.

        Raises:
            RewardUnavailableError: no reward within ``AMARIS_RETRY_SECONDS``.
        """
        if self.scored is not None:
            return self.scored
        retry = optional_float("AMARIS_RETRY_SECONDS", os.environ.get("AMARIS_RETRY_SECONDS"))
        target = Target.resolve(retry_seconds=retry)
        rollout: RolloutBody = {
            "id": f"openrlhf-{uuid.uuid4().hex}",
            "messages": episode_messages(self.prompt_messages(), self.turns),
            "finish_reason": finish_reason,
            "supplemental_context": _label(self.label),
        }
        if self.outcome:
            rollout["outcome"] = self.outcome
        metadata: MetadataBody = {}
        step = env_step()
        if step is not None:
            metadata["current_step"] = step
        item: ScoreItem = {"rollout": rollout, "metadata": metadata}
        result = await score_rollouts_async(target, [item])
        self.scored = Scored(result.values()[0], self.extra_logs(result))
        return self.scored

    def extra_logs(self, result: Rewards) -> dict[str, float]:
        """The reward vector's keys (NaN for a null value), the rubric version and the
        unscored flag, under ``amaris_``.

        Raises:
            ValueError: an :attr:`anchor_ids` entry is no criterion of the rubric that
                scored the episode.
        """
        vector = result.reward_vectors[0] if result.reward_vectors else None
        version = result.rubric_versions[0]
        missing = [key for key in self.anchor_ids if vector is not None and key not in vector]
        if vector is not None and missing:
            raise ValueError(
                f"anchor_ids {missing} are not criteria of rubric version {version} "
                f"(its reward keys: {sorted(vector)})"
            )
        values = vector or {}
        logs = {f"amaris_{key}": _number(values.get(key)) for key in reward_keys(self.anchor_ids)}
        logs["amaris_rubric_version"] = float(version or 0)
        logs["amaris_unscored"] = 0.0 if result.statuses[0] == "scored" else 1.0
        return logs


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


class AmarisAgentExecutor(MultiTurnAgentExecutor):
    """OpenRLHF's multi-turn executor over :class:`AmarisAgentInstance` episodes; an episode
    that reached ``max_len`` before a ``done`` step is scored with finish reason ``length``."""

    def __init__(self, agent_instance_cls: type[AmarisAgentInstance] = AmarisAgentInstance) -> None:
        if not issubclass(agent_instance_cls, AmarisAgentInstance):
            raise TypeError(f"{agent_instance_cls.__name__} is no AmarisAgentInstance")
        super().__init__(agent_instance_cls)

    # The arguments are OpenRLHF's (its tokenizer, vLLM engine, SamplingParams, images).
    async def execute(
        self,
        prompt: Any,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:  # OpenRLHF's own result: its JSON, as its executor returns it
        """One sample's episode, as OpenRLHF's executor runs it, scored by amaris."""
        running: list[AmarisAgentInstance] = []
        token = _EPISODES.set(running)
        try:
            # OpenRLHF's result, as its executor returns it.
            response: dict[str, Any] = await super().execute(
                prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine, images
            )
        finally:
            _EPISODES.reset(token)
        for episode in running:
            if episode.scored is None:
                scored = await episode.finish("length")
                response["reward"] = float(response["reward"]) + scored.reward
                response["scores"] = scored.reward
                response["extra_logs"] = scored.extra_logs
        return response
