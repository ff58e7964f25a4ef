"""verifiers 0.4.0 (``verifiers.v1``): amaris as a task's judge, scoring the rollout's trace.

verifiers composes a task's reward from its ``@vf.reward`` methods, the reward functions
its config plugs (``TaskConfig.rewards``: an import path) and the judges it plugs
(``TaskConfig.judges``: a :class:`verifiers.v1.Judge` found by its plugin id, after the
rewards); ``Task.score`` runs them after a rollout (and ``vf-replay`` on saved traces).
:class:`AmarisJudge` is that judge, its ``score(task, trace)`` one ``POST /batch_score``:

* **Trajectory**: the trace's messages (its final branch: prompt, assistant turns with
  their tool calls, tool results) as ``rollout.messages``
  (:func:`~amaris.integrations.episodes.episode_messages`); ``finish_reason`` from why the
  trace stopped (``max_turns``: ``tool_limit``; a token limit or a reply cut at its
  length: ``length``; a stage deadline: ``timeout``; an error: ``error``; else ``stop``).
* **Outcome**: the trace's metrics and the rewards recorded before the judge ran (a
  plugged judge runs after the task's rewards; a reward function beside them sees none),
  amaris's own left out. **Reference**: the task field ``reference_field`` (``answer``).
* **Group**: the task's key (every rollout of a task is one group). **Step**:
  ``AMARIS_STEP``, else the step amaris has open.
* **Reward**: amaris's score; the reward vector as metrics beside it, unweighted and not
  summed (verifiers' ``@vf.metric``): ``<name>/anchors``, ``<name>/adaptive``, one per
  criterion id, ``<name>/rubric_version`` and ``<name>/unscored`` (1 when
  ``scoring.on_failure: neutral`` gave the score); a null value is recorded as None.
* **Unscored**: retried for ``retry_seconds``, then :class:`RewardUnavailableError` is
  raised: verifiers records it on the trace as a task error, the trace is not ``ok`` and
  its reward None, never a number (verifiers' own failed rollout: ``--resume`` and an
  agent's ``retries`` rules redo it).

:func:`amaris_reward` is the judge with its defaults as a reward function, for
``TaskConfig.rewards`` (verifiers' loader cannot resolve a dotted judge id). It imports
verifiers, so it loads only where verifiers is installed (the other adapters do not).
"""

from __future__ import annotations

import json
import math
import os

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.types import content_text

from amaris.client import MetadataBody, Rewards, RolloutBody, ScoreItem
from amaris.integrations._remote import Target, env_step, optional_float, score_rollouts_async
from amaris.integrations.episodes import FIXED_KEYS, episode_messages
from amaris.integrations.text import ChatMessage, ToolCall
from amaris.trajectory import FinishReason

__all__ = ["AmarisJudge", "AmarisJudgeConfig", "amaris_reward", "trajectory"]

_LENGTH_STOPS = {"max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"}


class AmarisJudgeConfig(vf.JudgeConfig):
    """Where amaris is and what the rollout carries (``--env.taskset.task.judges``)."""

    id: str = "amaris"
    url: str | None = None
    """The amaris server; default ``AMARIS_URL``, else ``http://127.0.0.1:8002``."""
    api_key_var: str = "AMARIS_API_KEY"
    """The environment variable holding amaris's bearer key."""
    reference_field: str = "answer"
    """The task field sent as the reference answer (``supplemental_context``)."""
    high_level_goal: str | None = None
    model_size: str | None = None
    total_steps: int | None = None
    request_timeout: float = Field(600.0, gt=0)
    """Seconds per HTTP request (the judge may queue)."""
    retry_seconds: float | None = Field(None, ge=0)
    """How long an unscored rollout is retried before the judge raises; default
    ``AMARIS_RETRY_SECONDS``, else 60."""


class AmarisJudge(vf.Judge[None, AmarisJudgeConfig]):
    """amaris's reward for a rollout's trace, the reward vector recorded as metrics."""

    async def score(self, task: vf.TaskData, trace: vf.Trace) -> float:
        """The trace's reward from amaris (see the module's docstring).

        Raises:
            RewardUnavailableError: amaris gave no reward within ``retry_seconds``.
            amaris.InvalidRequestError: amaris refused the rollout (the field is named).
        """
        config = self.config
        retry = config.retry_seconds
        if retry is None:
            retry = optional_float("AMARIS_RETRY_SECONDS", os.environ.get("AMARIS_RETRY_SECONDS"))
        target = Target.resolve(
            config.url, os.environ.get(config.api_key_var), config.request_timeout, retry
        )
        result = await score_rollouts_async(target, [self.item(task, trace)])
        record_metrics(trace, self.reward_name, result)
        reward = result.rewards[0]
        if reward is None:  # a reward per sample, or RewardUnavailableError
            raise RuntimeError("amaris answered no reward")
        return reward

    def item(self, task: vf.TaskData, trace: vf.Trace) -> ScoreItem:
        """The ``/batch_score`` item for ``trace``: its trajectory and where training is."""
        config = self.config
        metadata: MetadataBody = {}
        step = env_step()
        if step is not None:
            metadata["current_step"] = step
        if config.high_level_goal is not None:
            metadata["high_level_goal"] = config.high_level_goal
        if config.model_size is not None:
            metadata["model_size"] = config.model_size
        if config.total_steps is not None:
            metadata["total_steps"] = config.total_steps
        rollout = trajectory(trace, self.reward_name)
        reference = getattr(task, config.reference_field, None) if config.reference_field else None
        if reference is not None:
            rollout["supplemental_context"] = (
                reference if isinstance(reference, str) else json.dumps(reference, default=str)
            )
        return {"rollout": rollout, "metadata": metadata}


async def amaris_reward(task: vf.TaskData, trace: vf.Trace) -> float:
    """:class:`AmarisJudge` with its defaults (``AMARIS_URL``, ``AMARIS_API_KEY``,
    ``AMARIS_RETRY_SECONDS``) as a verifiers reward function: ``TaskConfig.rewards =
    {"amaris": {"fn": "amaris.integrations.verifiers:amaris_reward"}}``."""
    return await AmarisJudge(AmarisJudgeConfig()).score(task, trace)


def trajectory(trace: vf.Trace, own: str = "amaris") -> RolloutBody:
    """``trace`` as an amaris rollout: messages, finish reason, outcome (the trace's
    metrics and recorded rewards, those named ``own`` or ``own/...`` left out) and group."""
    rollout: RolloutBody = {
        "id": f"verifiers-{trace.id}",
        "messages": episode_messages([_message(m) for m in trace.messages]),
        "finish_reason": finish_reason(trace),
    }
    signals = {**trace.metrics}
    signals.update((k, None if r is None else r.score) for k, r in trace.rewards.items())
    outcome = {
        k: v
        for k, v in signals.items()
        if v is not None and math.isfinite(v) and k != own and not k.startswith(f"{own}/")
    }
    if outcome:
        rollout["outcome"] = outcome
    if trace.task.key:
        rollout["group_id"] = trace.task.key
    return rollout


def finish_reason(trace: vf.Trace) -> FinishReason:
    """Why the trace ended, in amaris's words."""
    stop = trace.stop_condition or ""
    if trace.errors or stop.endswith("error"):
        return "error"
    if trace.is_timeout:
        return "timeout"
    if stop == "max_turns":
        return "tool_limit"
    if stop in _LENGTH_STOPS or trace.is_truncated:
        return "length"
    return "stop"


def record_metrics(trace: vf.Trace, name: str, result: Rewards) -> None:
    """The reward vector, the rubric version and the unscored flag as ``name/<key>``
    metrics of ``trace`` (None where amaris has no value)."""
    vectors = result.reward_vectors or [None]
    vector = dict(vectors[0] or {})
    for key in [*FIXED_KEYS, *sorted(k for k in vector if k not in FIXED_KEYS)]:
        value = vector.get(key)
        trace.metrics[f"{name}/{key}"] = None if value is None else float(value)
    version = result.rubric_versions[0]
    trace.metrics[f"{name}/rubric_version"] = None if version is None else float(version)
    trace.metrics[f"{name}/unscored"] = 0.0 if result.statuses[0] == "scored" else 1.0


def _message(message: vf.Message) -> ChatMessage:
    """A verifiers message in OpenAI's form; a namespaced tool is ``namespace.name``."""
    if isinstance(message, vf.AssistantMessage):
        chat: ChatMessage = {"role": "assistant", "content": message.content}
        calls: list[ToolCall] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": f"{call.namespace}.{call.name}" if call.namespace else call.name,
                    "arguments": call.arguments,
                },
            }
            for call in message.tool_calls or []
        ]
        if calls:
            chat["tool_calls"] = calls
        return chat
    text = content_text(message.content) if isinstance(message.content, list) else None
    chat = {"role": message.role, "content": message.content if text is None else text}
    if isinstance(message, vf.ToolMessage):
        chat["tool_call_id"] = message.tool_call_id
    return chat
