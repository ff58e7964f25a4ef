"""NeMo Gym 0.7.0: a resources server whose ``/verify`` is amaris's reward for the episode.

NeMo Gym's agents (``simple_agent`` and the others) run an episode against the Responses
API, then post ``/verify`` to the environment's resources server with the request
(``responses_create_params``: the prompt) and the agent's ``response`` (every output
item: messages, ``function_call``, ``function_call_output``). :class:`AmarisResourcesServer`
is that server (a ``SimpleResourcesServer``: subclass it to add the environment's tool
routes, or run it as it is, ``entrypoint: app.py``); its ``verify`` makes one
``POST /batch_score``:

* **Trajectory**: ``instructions``, the input and the output items as chat messages
  (:func:`chat_messages`; a ``function_call`` joins the assistant message before it,
  reasoning items are left out), written by
  :func:`~amaris.integrations.episodes.episode_messages`. ``finish_reason``: ``error``
  (the response has an error), ``length`` (cut at ``max_output_tokens``), ``tool_limit``
  (the agent stopped after a tool's answer, at its ``max_steps``), else ``stop``.
* **Outcome**: :meth:`AmarisResourcesServer.outcome` (none by default: override it with
  the environment's verifiable signals). **Reference**: the dataset field
  ``reference_field`` (``expected_answer``). **Group**: the row's ``task_id``,
  ``problem_id`` or ``instance_id``, else the prompt. **Step**: ``AMARIS_STEP``, else the
  step amaris has open. **Rollout id**: NeMo Gym's, when it sends one.
* **Answer**: ``reward`` is amaris's score; ``reward_components`` (NeMo Gym's reward
  vector, ``BaseMultiRewardVerifyResponse``) holds ``anchors``, ``adaptive`` once the
  rubric has adaptive criteria (left out while it is null) and each id of ``anchor_ids``;
  the same values as top-level ``amaris_*`` fields (which NeMo Gym's aggregate metrics
  read), with ``amaris_rubric_version`` and ``amaris_unscored``.
* **Unscored**: retried for ``retry_seconds``; then, as for any judge that failed, a
  ``JudgeError``: NeMo Gym's ``judge_failsafe`` answers ``mask_sample: true``,
  ``failure_kind: "judge_failed"``, the reason in ``failure_reason`` (reward 0.0, masked:
  routed to the failures file, out of the aggregate metrics, retried on resume). Under
  ``scoring.on_failure: neutral`` the neutral score is the reward and the value of every
  component but ``adaptive``, ``amaris_unscored`` 1, ``failure_kind`` naming it, the
  sample kept.

It imports NeMo Gym, so it loads only where NeMo Gym is installed (the other adapters do not).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from nemo_gym.base_resources_server import (
    BaseMultiRewardVerifyResponse,
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    SimpleResourcesServer,
)
from nemo_gym.judge import JudgeError
from pydantic import ConfigDict, Field

from amaris.client import (
    MetadataBody,
    Rewards,
    RewardUnavailableError,
    RolloutBody,
    ScoreItem,
    ServerUnavailableError,
)
from amaris.integrations._remote import Target, env_step, optional_float, score_rollouts_async
from amaris.integrations.episodes import FIXED_KEYS, episode_messages
from amaris.integrations.text import ChatMessage, ToolCall
from amaris.jsonfile import JSONDict
from amaris.trajectory import FinishReason

__all__ = [
    "AmarisResourcesServer",
    "AmarisResourcesServerConfig",
    "AmarisVerifyRequest",
    "AmarisVerifyResponse",
    "chat_messages",
]

TEXT_PARTS = {"input_text", "output_text", "text", "refusal"}
GROUP_FIELDS = ("task_id", "problem_id", "instance_id")


class AmarisResourcesServerConfig(BaseResourcesServerConfig):
    """The server's NeMo Gym config: where amaris is and what the rollout carries."""

    amaris_url: str | None = None
    """The amaris server; default ``AMARIS_URL``, else ``http://127.0.0.1:8002``."""
    amaris_api_key_var: str = "AMARIS_API_KEY"
    """The environment variable holding amaris's bearer key."""
    anchor_ids: list[str] = Field(default_factory=list)
    """Anchor criteria ids (``A1``...) given their own reward component."""
    reference_field: str = "expected_answer"
    """The dataset field sent as the reference answer (``supplemental_context``)."""
    high_level_goal: str | None = None
    model_size: str | None = None
    total_steps: int | None = None
    request_timeout: float = Field(600.0, gt=0)
    """Seconds per HTTP request (the judge may queue)."""
    retry_seconds: float | None = Field(None, ge=0)
    """How long an unscored episode is retried; default ``AMARIS_RETRY_SECONDS``, else 60."""


class AmarisVerifyRequest(BaseVerifyRequest):
    """``/verify``'s body: NeMo Gym's, with the dataset row's fields kept."""

    model_config = ConfigDict(extra="allow")


class AmarisVerifyResponse(BaseMultiRewardVerifyResponse):
    """The verify answer: NeMo Gym's reward and reward vector, amaris's values beside."""

    model_config = ConfigDict(extra="allow")

    amaris_status: str = "scored"
    amaris_unscored: float = 0.0
    amaris_rubric_version: int | None = None
    amaris_anchors: float | None = None
    amaris_adaptive: float | None = None


class AmarisResourcesServer(SimpleResourcesServer):
    """A NeMo Gym resources server verifying each episode with amaris."""

    ray_enabled = False
    config: AmarisResourcesServerConfig

    # The environment's own signals: JSON of its making, the rollout's ``outcome``.
    def outcome(self, body: AmarisVerifyRequest) -> JSONDict | None:
        """The episode's verifiable signals (``tests_passed``...), shown to the judge as
        evidence; none here. Override it for the environment's own checks."""
        return None

    async def verify(self, body: AmarisVerifyRequest) -> AmarisVerifyResponse:
        """amaris's reward for the episode (see the module's docstring).

        Raises:
            JudgeError: no reward within ``retry_seconds``, or amaris unreachable.
            amaris.InvalidRequestError: amaris refused the episode (the field is named).
            ValueError: an ``anchor_ids`` entry is no criterion of the scoring rubric.
        """
        config = self.config
        retry = config.retry_seconds
        if retry is None:
            retry = optional_float("AMARIS_RETRY_SECONDS", os.environ.get("AMARIS_RETRY_SECONDS"))
        key = os.environ.get(config.amaris_api_key_var)
        target = Target.resolve(config.amaris_url, key, config.request_timeout, retry)
        try:
            result = await score_rollouts_async(target, [self.item(body)])
        except (RewardUnavailableError, ServerUnavailableError) as error:
            raise JudgeError(f"amaris: {error}") from error
        return self.answer(body, result)

    def item(self, body: AmarisVerifyRequest) -> ScoreItem:
        """The ``/batch_score`` item for the episode of ``body``."""
        config = self.config
        params, response = body.responses_create_params, body.response
        items = [params.input] if isinstance(params.input, str) else list(params.input)
        chat = chat_messages(params.instructions, [*items, *response.output])
        rollout_id = body.capture_rollout_id or uuid.uuid4().hex
        rollout: RolloutBody = {
            "id": f"nemo-gym-{rollout_id}",
            "messages": episode_messages(chat),
            "finish_reason": finish_reason(response),
        }
        extra = body.model_extra or {}
        reference = extra.get(config.reference_field) if config.reference_field else None
        if reference is not None:
            rollout["supplemental_context"] = (
                reference if isinstance(reference, str) else json.dumps(reference, default=str)
            )
        group = next((extra[f] for f in GROUP_FIELDS if extra.get(f) is not None), None)
        if group is not None:
            rollout["group_id"] = str(group)
        outcome = self.outcome(body)
        if outcome:
            rollout["outcome"] = outcome
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
        return {"rollout": rollout, "metadata": metadata}

    def answer(self, body: AmarisVerifyRequest, result: Rewards) -> AmarisVerifyResponse:
        """NeMo Gym's verify answer for amaris's ``result`` (one scored sample)."""
        score = result.rewards[0]
        if score is None:  # a reward per sample, or RewardUnavailableError
            raise JudgeError("amaris answered no reward")
        status = result.statuses[0]
        vector = dict((result.reward_vectors or [None])[0] or {})
        missing = [key for key in self.config.anchor_ids if vector and key not in vector]
        if missing:
            raise ValueError(
                f"anchor_ids {missing} are not criteria of rubric version "
                f"{result.rubric_versions[0]} (its reward keys: {sorted(vector)})"
            )
        keys = [*FIXED_KEYS, *self.config.anchor_ids]
        if status == "scored":
            components = {k: float(v) for k in keys if (v := vector.get(k)) is not None}
        else:  # the neutral score: no criterion was judged, adaptive has no value
            components = {k: score for k in keys if k != "adaptive"}
        neutral = f"amaris: {status}, the neutral score (scoring.on_failure)"
        return AmarisVerifyResponse(
            **body.model_dump(),
            reward=score,
            reward_components=components,
            amaris_status=status,
            amaris_unscored=0.0 if status == "scored" else 1.0,
            amaris_rubric_version=result.rubric_versions[0],
            amaris_anchors=vector.get("anchors"),
            amaris_adaptive=vector.get("adaptive"),
            failure_kind=None if status == "scored" else "judge_failed",
            failure_reason=None if status == "scored" else neutral,
        )


def _get(item: object, key: str, default: Any = None) -> Any:
    """A field of a Responses-API item or content part: NeMo Gym's model, or its JSON."""
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)


def _text(content: object) -> str | None:
    """A content: its text, or the text of its text parts (images and files left out)."""
    if content is None or isinstance(content, str):
        return content
    parts = content if isinstance(content, Sequence) else []
    kept = [p for p in parts if _get(p, "type") in TEXT_PARTS]
    return "".join(str(_get(p, "text") or _get(p, "refusal") or "") for p in kept)


def chat_messages(instructions: str | None, items: Sequence[Any]) -> list[ChatMessage]:
    """Responses-API items (input then output) as OpenAI chat messages: ``instructions``
    a system message, ``message`` items by role, a ``function_call`` (or
    ``custom_tool_call``) a tool call of the assistant message before it (of a new one
    when a tool's answer or another role came between), its ``*_output`` a tool message;
    reasoning and hosted tools' items are left out. An episode with no assistant message
    ends with an empty one: the policy answered nothing."""
    chat: list[ChatMessage] = []
    if instructions:
        chat.append({"role": "system", "content": instructions})
    for item in items:
        kind = _get(item, "type", "message")
        if isinstance(item, str):  # a text input: the user's
            chat.append({"role": "user", "content": item})
        elif kind == "message":
            role, content = str(_get(item, "role", "user")), _text(_get(item, "content"))
            chat.append({"role": role, "content": content})
        elif kind in ("function_call", "custom_tool_call"):
            name = str(_get(item, "name", "?"))
            if _get(item, "namespace"):
                name = f"{_get(item, 'namespace')}.{name}"
            arguments = _get(item, "arguments", _get(item, "input", ""))
            call: ToolCall = {
                "id": str(_get(item, "call_id")),
                "type": "function",
                "function": {"name": name, "arguments": str(arguments)},
            }
            if chat and chat[-1].get("role") == "assistant":
                chat[-1].setdefault("tool_calls", []).append(call)
            else:
                chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = _get(item, "output")
            text = output if isinstance(output, str) else _text(output)
            call_id = str(_get(item, "call_id"))
            chat.append({"role": "tool", "tool_call_id": call_id, "content": text})
    if not any(m.get("role") == "assistant" for m in chat):
        chat.append({"role": "assistant", "content": ""})
    return chat


def finish_reason(response: Any) -> FinishReason:
    """Why NeMo Gym's ``response`` (an episode's) ended, in amaris's words."""
    if getattr(response, "error", None) is not None:
        return "error"
    details = getattr(response, "incomplete_details", None)
    if details is not None:
        return "length" if getattr(details, "reason", None) == "max_output_tokens" else "error"
    kinds = [_get(o, "type") for o in response.output]
    last = next((k for k in reversed(kinds) if k != "reasoning"), None)
    if last in ("function_call_output", "custom_tool_call_output"):
        return "tool_limit"
    return "stop"
