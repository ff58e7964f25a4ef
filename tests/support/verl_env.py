"""verl 0.9.1's own objects, in process, for the trainer-contract tests.

* :func:`load_verl`: verl's modules once the pinned package is installed and the GPU
  modules stubbed (tests/support/trainer_env.py).
* :func:`save_model`: the folder verl loads as ``actor_rollout_ref.model.path``: the byte
  tokenizer with a chat template and a one-layer Llama config (no weights: nothing runs it).
* :func:`compose_config`: ``ppo_trainer.yaml`` (or another entry point's file) composed by
  Hydra as ``python -m verl.trainer.main_ppo <overrides>`` composes it.
* :class:`RewardWorker`: a ``RewardLoopWorker`` behind the two calls verl makes of its
  handle (``compute_score_batch`` from ``compute_rm_score``, ``compute_score`` from the
  agent loop), run on the worker's event loop.
* :class:`ScriptedServer`: the LLM server the agent loop generates with, a script per
  sample (``priority``, verl's index of the sample in the step) and turn.
* :func:`agent_loop_step`: a step's rollout and rewards as ``RayPPOTrainer.fit`` makes
  them without a reward model: verl's ``RLHFDataset`` rows, ``uid``s, ``_get_gen_batch``,
  ``repeat``, ``AgentLoopManager.generate_sequences`` over ``AgentLoopWorker``s (their
  ``_compute_score`` calling the reward workers), ``union``, ``extract_reward``.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir
from transformers import LlamaConfig

from tests.support.trainer_env import byte_tokenizer, install_trainers, stub_gpu_modules

DOWN = "(judge down)"
"""A response holding this gets a 500 from the judge of the ``verl_amaris`` fixture."""
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
TOOLS = '''"""A function tool for verl's tool agent loop (``multi_turn.function_tool_path``)."""

from verl.tools.function_tool import function_tool


@function_tool
def multiply(a: int, b: int) -> str:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return str(a * b)
'''


def load_verl() -> SimpleNamespace:
    """verl's modules the tests drive (installed and stubbed first)."""
    install_trainers()
    stub_gpu_modules()
    agent_loop = importlib.import_module("verl.experimental.agent_loop.agent_loop")
    for loop in ("single_turn_agent_loop", "tool_agent_loop"):  # they register themselves
        importlib.import_module(f"verl.experimental.agent_loop.{loop}")
    package = Path(importlib.import_module("verl").__file__ or "").parent
    return SimpleNamespace(
        version=importlib.import_module("verl").__version__,
        protocol=importlib.import_module("verl.protocol"),
        reward=importlib.import_module("verl.trainer.ppo.reward"),
        loop=importlib.import_module("verl.experimental.reward_loop.reward_loop"),
        agent_loop=agent_loop,
        replica=importlib.import_module("verl.workers.rollout.replica"),
        dataset=importlib.import_module("verl.utils.dataset.rl_dataset"),
        trainer=importlib.import_module("verl.trainer.ppo.ray_trainer"),
        config_dir=package / "trainer/config",
        async_config_dir=package / "experimental/fully_async_policy/config",
    )


def save_model(folder: Path) -> str:
    """The byte tokenizer (with :data:`CHAT_TEMPLATE`) and a Llama config in ``folder``,
    and :data:`TOOLS` beside them as ``tools.py``; returns the folder."""
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(folder)
    (folder / "tools.py").write_text(TOOLS)
    return str(folder)


def compose_config(
    config_dir: Path, overrides: Sequence[str], name: str = "ppo_trainer"
) -> Any:  # an OmegaConf DictConfig
    """``<name>.yaml`` in ``config_dir`` composed with ``overrides``, as Hydra does."""
    with initialize_config_dir(str(config_dir), version_base=None):
        return compose(name, overrides=list(overrides))


def documented(manager: str, url: str, model: str, *more: str) -> list[str]:
    """The overrides of docs/integrations.md (examples/verl/config.sh) for ``manager``
    (``amaris``: :class:`AmarisRewardManager`, else one of verl's)."""
    adapter = importlib.import_module("amaris.integrations.verl").__file__ or ""
    chosen = (
        [
            "reward.reward_manager.source=importlib",
            "reward.reward_manager.name=AmarisRewardManager",
            f"reward.reward_manager.module.path={Path(adapter).with_name('verl_manager.py')}",
        ]
        if manager == "amaris"
        else [f"reward.reward_manager.name={manager}"]
    )
    return [
        f"reward.custom_reward_function.path={adapter}",
        "reward.custom_reward_function.name=compute_score_async",
        f"+reward.custom_reward_function.reward_kwargs.url={url}",
        "+reward.custom_reward_function.reward_kwargs.retry_seconds=0",
        f"actor_rollout_ref.model.path={model}",
        *chosen,
        *more,
    ]


AGENT_LOOP = (
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.prompt_length=128",
    "actor_rollout_ref.rollout.response_length=256",
    "actor_rollout_ref.rollout.multi_turn.format=hermes",
)
"""Overrides every agent-loop step needs (the rollout engine's name and lengths, the tool
call format); ``multi_turn.function_tool_path`` names :data:`TOOLS`."""


class RewardWorker:
    """A ``RewardLoopWorker`` handle: ``.remote`` runs the call on the worker's loop (a ray
    actor has one for its life) and gives what ``ray.get`` / ``await`` of the ref gives."""

    def __init__(self, verl: SimpleNamespace, config: Any, router: str | None = None) -> None:
        self.worker = verl.loop.RewardLoopWorker(config, router)
        self.loop = self.worker.loop
        self.compute_score_batch = SimpleNamespace(remote=self._batch)
        self.compute_score = SimpleNamespace(remote=self.worker.compute_score)

    def _batch(self, data: Any) -> Any:
        return self.loop.run_until_complete(self.worker.compute_score_batch(data))


def compute_rm_score(
    verl: SimpleNamespace, config: Any, workers: list[RewardWorker], data: Any
) -> Any:
    """verl's own ``RewardLoopManager.compute_rm_score`` over ``workers``."""
    manager = SimpleNamespace(
        reward_model_manager=None,
        reward_loop_workers=workers,
        reward_manager_cls=verl.reward.resolve_reward_manager_cls(config),
    )
    return verl.loop.RewardLoopManager.compute_rm_score(manager, data)


Script = Callable[[str], str]
"""The policy's next message in a conversation, given the conversation so far (decoded)."""


class ScriptedServer:
    """The LLM server of the agent loop. A conversation (verl's ``request_id``: one per
    sample, kept across its turns) takes, at its first turn, the next script queued for
    the first question of ``scripts`` its prompt holds; that script answers every turn."""

    def __init__(self, verl: SimpleNamespace, scripts: Mapping[str, Sequence[Script]]) -> None:
        self.verl = verl
        self.queued = {question: list(queue) for question, queue in scripts.items()}
        self.conversations: dict[str, Script] = {}
        self.tokenizer = byte_tokenizer()
        self.turns: list[str] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], **kwargs: Any) -> Any:
        """verl's ``LLMServerClient.generate``: the reply's token ids, then EOS."""
        conversation = self.tokenizer.decode(prompt_ids)
        if request_id not in self.conversations:
            question = next(q for q in self.queued if q in conversation)
            self.conversations[request_id] = self.queued[question].pop(0)
        self.turns.append(request_id)
        reply = self.conversations[request_id](conversation)
        ids = self.tokenizer(reply)["input_ids"] + [self.tokenizer.eos_token_id]
        return self.verl.replica.TokenOutput(token_ids=ids, extra_fields={})


def tool_call(name: str, **arguments: Any) -> str:
    """A hermes tool call, as the tool agent loop parses it."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def dataset(verl: SimpleNamespace, config: Any, folder: Path, rows: list[dict[str, Any]]) -> Any:
    """``rows`` written as a parquet file and read back by verl's ``RLHFDataset``, then
    collated into one batch (``DataProto.from_single_dict``), as the trainer's loader does."""
    path = folder / "train.parquet"
    pd.DataFrame(rows).to_parquet(path)
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    data = verl.dataset.RLHFDataset(str(path), tokenizer, config.data)
    items = [data[i] for i in range(len(data))]
    return verl.protocol.DataProto.from_single_dict(verl.dataset.collate_fn(items))


def agent_loop_step(
    verl: SimpleNamespace,
    config: Any,
    batch: Any,
    server: ScriptedServer,
    reward_workers: list[RewardWorker],
    step: int,
) -> tuple[Any, Any, dict[str, Any]]:
    """One step of ``RayPPOTrainer.fit`` without a reward model, up to ``extract_reward``:
    the step's batch (``rm_scores`` and what verl logs), the reward tensor, the extra infos."""
    loop = reward_workers[0].loop
    batch.non_tensor_batch["uid"] = np.array(
        [str(uuid.uuid4()) for _ in range(len(batch))], dtype=object
    )
    gen_batch = verl.trainer.RayPPOTrainer._get_gen_batch(None, batch)
    gen_batch.meta_info["global_steps"] = step
    n = config.actor_rollout_ref.rollout.n
    gen_batch = gen_batch.repeat(repeat_times=n, interleave=True)
    workers = [
        verl.agent_loop.AgentLoopWorker(config, server, None, reward_workers)
        for _ in range(config.actor_rollout_ref.rollout.agent.num_workers)
    ]
    handles = [
        SimpleNamespace(generate_sequences=SimpleNamespace(remote=w.generate_sequences))
        for w in workers
    ]
    manager = SimpleNamespace(agent_loop_workers=handles)
    manager._performance_metrics = functools.partial(
        verl.agent_loop.AgentLoopManager._performance_metrics, manager
    )

    async def generate() -> Any:  # awaited: verl's auto_await then runs it on this loop
        return await verl.agent_loop.AgentLoopManager.generate_sequences(manager, gen_batch)

    output = loop.run_until_complete(generate())
    output.meta_info.pop("timing", None)
    step_batch = batch.repeat(repeat_times=n, interleave=True).union(output)
    rewards, infos = verl.reward.extract_reward(step_batch)
    return step_batch, rewards, infos


def event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop, current for this thread: a reward worker (and its manager) binds
    the current loop when it is built, as a ray actor does for its life."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop
