"""verl reward-loop manager that hands amaris the prompt from verl's own ``raw_prompt``, and
verl's tool agent loop recording the episode amaris scores.

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

**Agent episodes.** verl's ``ToolAgentLoop`` keeps its chat (tool calls and results) to
itself and records no reason for ending. :class:`AmarisToolAgentLoop` is that loop, which
also puts the chat and the finish reason in the loop's ``extra_fields["extras"]`` (a key
verl gives every sample, so batches of mixed agent loops still concatenate); the ``naive``,
``rate_limited`` and this manager hand those fields to the reward function, which then
scores the episode as a trajectory. Register it by ``rollout.agent.agent_loop_config_path``
(examples/verl/agent_loop.yaml).

It imports verl, so it loads only in a verl environment (the other adapters do not).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np
from verl import DataProto
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

from amaris.integrations.verl import VerlScore

__all__ = ["AmarisRewardManager", "AmarisToolAgentLoop", "padding_problems"]

Message = dict[str, Any]
"""A message of verl's agent loop (OpenAI's form; tool-call arguments parsed)."""


class AmarisToolAgentLoop(ToolAgentLoop):
    """verl's tool agent loop, recording for the reward function, in its output's
    ``extra_fields["extras"]``: ``messages``, the whole chat (a last generation the loop
    stopped before parsing is parsed and added: its tool calls were not run; assistant
    texts without the tokenizer's special tokens), and ``finish_reason``: ``length`` when
    the response reached ``rollout.response_length``, ``tool_limit`` when
    ``multi_turn.max_assistant_turns`` or ``max_user_turns`` ended it with tool calls not
    run, else ``stop`` (the policy answered without a tool call). A tool's
    ``agent_data.extra_fields["outcome"]`` (its verifiable signals, a JSON object) moves
    there as ``outcome``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """verl's loop (hydra passes the config entry's own keys, ``name`` too)."""
        super().__init__(*args, **kwargs)
        self.conversation: list[Message] = []
        self.generations: list[list[int]] = []

    # verl's own signature: its multimodal info is its JSON.
    async def process_multi_modal_info(self, messages: list[Message]) -> dict[str, Any]:
        """verl's, keeping ``messages``: ``run`` hands it the list the chat grows in."""
        self.conversation = messages
        found: dict[str, Any] = await super().process_multi_modal_info(messages)  # verl's JSON
        return found

    # verl's other arguments (response mask, log probabilities) and answer, as they are
    async def ct_merge_assistant_token(
        self,
        runtime_token_ids: list[int],
        assistant_token_ids: list[int],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """verl's, keeping each generation's token ids."""
        self.generations.append(list(assistant_token_ids))
        return await super().ct_merge_assistant_token(
            runtime_token_ids, assistant_token_ids, *args, **kwargs
        )

    # verl's sampling parameters and dataset fields, as it passes them
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        """verl's episode, its output recording the chat and why it ended."""
        self.conversation, self.generations = [], []
        output = await super().run(sampling_params, **kwargs)
        messages = [dict(message) for message in self.conversation]
        said = [m for m in messages[len(kwargs["raw_prompt"]) :] if m.get("role") == "assistant"]
        pending = False  # tool calls the loop stopped before running
        if len(self.generations) > len(said):
            messages.append(await self.last_message())
            pending = bool(messages[-1].get("tool_calls"))
        messages = [self.cleaned(message) for message in messages]
        if len(output.response_mask) >= self.response_length:
            reason = "length"
        else:
            reason = "tool_limit" if pending else "stop"
        extras = output.extra_fields.get("extras")
        record = dict(extras) if isinstance(extras, Mapping) else {}
        record.update(messages=messages, finish_reason=reason)
        outcome = output.extra_fields.pop("outcome", None)
        if outcome is not None:
            record["outcome"] = outcome
        output.extra_fields["extras"] = record
        return output

    def cleaned(self, message: Message) -> Message:
        """``message``, an assistant's text without the tokenizer's special tokens: verl's
        parser keeps them, and an end-of-turn token would stay in the final answer that
        rule criteria check."""
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, str):
            for token in self.tokenizer.all_special_tokens:
                content = content.replace(token, "")
            message["content"] = content
        return message

    async def last_message(self) -> Message:
        """The last generation as the loop would have added it: its text and tool calls."""
        schemas = [tool.tool_schema for tool in self.tools.values()]
        content, calls = await self.tool_parser.extract_tool_calls(self.generations[-1], schemas)
        message: Message = {"role": "assistant", "content": content or ""}
        if calls:
            message["tool_calls"] = [
                {
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                    **({"id": call.tool_call_id} if call.tool_call_id else {}),
                }
                for call in calls
            ]
        return message


def with_prompt(data: DataProto) -> DataProto:
    """The last sample of ``data`` (the one verl scores), its ``extra_info`` holding the
    prompt and, when the sample is an :class:`AmarisToolAgentLoop` episode scored in a
    batch (``compute_rm_score``), the episode; ``data`` itself is left as it was."""
    last = data[-1:]
    infos = last.non_tensor_batch.get("extra_info")
    info = dict(infos[0]) if infos is not None and isinstance(infos[0], dict) else {}
    raw = last.non_tensor_batch.get("raw_prompt")
    if not (info.get("prompt") or info.get("question")) and raw is not None:
        info["prompt"] = [dict(message) for message in raw[0]]
    extras = last.non_tensor_batch.get("extras")
    if "extras" not in info and extras is not None and isinstance(extras[0], Mapping):
        info["extras"] = extras[0]
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
