"""TRL 1.16.0's own ``GRPOTrainer`` scoring with amaris: ``_calculate_rewards`` and steps.

A real ``GRPOTrainer`` (a one-layer Llama made from a config, the byte tokenizer of
tests/support/trainer_env.py, on CPU) with ``amaris_reward_func`` as its reward function: its
``_calculate_rewards`` on standard text, two real training steps (generation, rewards,
advantages, the update) logged under the trainer's own steps, and a step during a judge
outage. The agent path: a training step with ``tools=``, TRL running the tool the policy
calls, rewarded by ``amaris_reward_funcs`` (multi-reward GRPO): amaris gets each episode
as ``rollout.messages``, once, and each key's function gets that episode's value.
Nothing is stubbed.
"""

from __future__ import annotations

import importlib.metadata
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen3_chat_template

from amaris.agents.prompts import parse_data_message
from amaris.integrations.trl import RewardFunc, amaris_reward_func, amaris_reward_funcs
from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, serve_in_thread
from tests.support.settings import llm_settings
from tests.support.trainer_env import byte_tokenizer

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

PROMPT = [{"role": "user", "content": "What is 6 * 7? Use the calculator."}]
LENGTH = {"kind": "length", "min_chars": 1}
FIRST_TURN = (
    '<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call><|im_end|>'
)
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def grpo_trainer(url: str, output_dir: Path, max_steps: int = 1) -> GRPOTrainer:
    """A GRPO trainer (1 prompt x 2 generations a step) rewarded by amaris at ``url``."""
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    dataset = Dataset.from_list([{"prompt": PROMPT, "answer": "42", "prompt_id": "p0"}] * 4)
    args = GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=max_steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
    )
    return GRPOTrainer(
        model=LlamaForCausalLM(config),
        reward_funcs=[amaris_reward_func(url, retry_seconds=0)],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


@pytest.fixture
def amaris(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[Any]:
    """A factory: amaris on uvicorn judging through the fake LLM, its data in ``folder``."""
    stack: list[Any] = []

    def start(folder: str = "amaris", **overrides: Any) -> tuple[str, Any]:
        (tmp_path / folder).mkdir()
        settings = llm_settings(
            tmp_path / folder,
            fake_llm,
            **{"gateway.max_attempts": 1, "scoring.retry_after_seconds": 0, **overrides},
        )
        app = in_memory_app(settings)
        serving = serve_in_thread(app)
        stack.append(serving)
        return serving.__enter__(), app.state.services

    yield start
    for serving in reversed(stack):
        serving.__exit__(None, None, None)


ANCHORS = {
    "anchor_rubrics": [
        {"text": "The response gives the correct final answer.", "weight": 1.0},
        {"text": "The final answer is not empty.", "weight": 0.5, "rule": LENGTH},
    ]
}
"""Two anchors: the judge's (A1) and a rule amaris checks (A2)."""


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.

    Returns:
        The product of the two factors.
    """
    return a * b


class Calculator:
    """An episode's environment (``environment_factory``: one per rollout); its method is
    the tool."""

    def reset(self, **example: Any) -> None:
        self.products: list[int] = []

    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: The first factor.
            b: The second factor.

        Returns:
            The product of the two factors.
        """
        self.products.append(a * b)
        return a * b


def tool_calling_trainer(output_dir: Path, funcs: list[RewardFunc], **agent: Any) -> GRPOTrainer:
    """A GRPO trainer with the tool ``multiply`` (``agent``: ``tools`` or
    ``environment_factory``), 1 prompt x 2 generations, rewarded by ``funcs``. The
    tokenizer speaks Qwen3's chat template, whose tool calls TRL parses."""
    tokenizer = byte_tokenizer()
    tokenizer.chat_template = qwen3_chat_template
    call = tokenizer(FIRST_TURN, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def first_turn(prompts: list[Any], trainer: GRPOTrainer) -> dict[str, Any]:
        # TRL's rollout_func: the policy's first turn calls the tool (a random model would
        # not); TRL then runs the tool and the model writes the turn after its answer.
        texts = [
            tokenizer.apply_chat_template(
                p, tools=[multiply], add_generation_prompt=True, tokenize=False
            )
            for p in prompts
        ]
        prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        return {"prompt_ids": prompt_ids, "completion_ids": [call] * len(prompts), "logprobs": None}

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    dataset = Dataset.from_list([{"prompt": PROMPT, "answer": "42", "prompt_id": "p0"}] * 4)
    args = GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=200,
        max_steps=1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        reward_weights=[1.0] + [0.5] * (len(funcs) - 1),
    )
    return GRPOTrainer(
        model=LlamaForCausalLM(config),
        reward_funcs=funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=first_turn,
        **agent,
    )


def recorded(func: RewardFunc, got: dict[str, list[float | None]]) -> RewardFunc:
    """``func``, under its name, keeping what it gave TRL."""

    async def reward(
        prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        got[func.__name__] = values = await func(prompts, completions, **kwargs)
        return values

    reward.__name__ = func.__name__
    return reward


def test_a_tool_calling_step_sends_episodes_and_each_key_gets_its_value(
    amaris: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert importlib.metadata.version("trl") == "1.16.0"
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    url, services = amaris(**ANCHORS)
    got: dict[str, list[float | None]] = {}
    funcs = amaris_reward_funcs(url, anchor_ids=["A1", "A2"], retry_seconds=0)
    trainer = tool_calling_trainer(
        tmp_path / "out", [recorded(f, got) for f in funcs], tools=[multiply]
    )
    trainer.train()
    (step, _) = trainer.state.log_history
    assert step["tools/call_frequency"] == 1.0
    # One rollout per sample for the four reward functions, each the whole episode: the
    # call with its id and arguments as a string, the tool's answer naming it.
    records = services.rollouts.load_step(0)
    assert len(records) == 2
    episodes = [r.rollout.messages or [] for r in records]
    for messages in episodes:
        assert messages[:3] == [
            {"role": "user", "content": PROMPT[0]["content"]},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1_0",
                        "type": "function",
                        "function": {"name": "multiply", "arguments": '{"a": 6, "b": 7}'},
                    }
                ],
            },
            {"role": "tool", "content": "42", "tool_call_id": "call_1_0"},
        ]
        assert messages[3]["role"] == "assistant"  # the model's turn after the answer
    # Each function got its key of the episode's reward vector: the same episodes scored
    # by a second server (no shared cache) give the same values.
    names = ["amaris", "amaris_anchors", "amaris_adaptive", "amaris_A1", "amaris_A2"]
    assert sorted(got) == sorted(names)
    direct_url, _ = amaris("direct", **ANCHORS)
    direct = []
    for i, messages in enumerate(episodes):
        rollout = {"id": f"direct-{i}", "messages": messages, "supplemental_context": "42"}
        answer = httpx.post(f"{direct_url}/score", json={"rollout": rollout}, timeout=60).json()
        assert answer["status"] == "scored", answer
        vector = answer["rewards"]
        keys = (vector["anchors"], vector["adaptive"], vector["A1"], vector["A2"])
        direct.append((answer["score"], *keys))
    received = list(zip(*(got[name] for name in names), strict=True))
    assert sorted(received, key=str) == sorted(direct, key=str)
    # the judge's criterion and the rule differ, and no adaptive criteria yet
    assert {(a1, a2, adaptive) for _, _, adaptive, a1, a2 in received} == {(0.0, 1.0, None)}
    # TRL logged each function's mean over the values it got.
    for name in ("amaris", "amaris_anchors", "amaris_A1", "amaris_A2"):
        values = [v for v in got[name] if v is not None]
        assert step[f"rewards/{name}/mean"] == pytest.approx(sum(values) / len(values))
    assert step["amaris/unscored"] == 0.0
    mean_adaptive = step["rewards/amaris_adaptive/mean"]
    assert mean_adaptive is None or math.isnan(mean_adaptive)


def test_an_environments_outcome_reaches_amaris_with_its_episode(
    amaris: Any, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    url, services = amaris()
    func = amaris_reward_func(url, retry_seconds=0, outcome=lambda env: {"products": env.products})
    trainer = tool_calling_trainer(tmp_path / "out", [func], environment_factory=Calculator)
    trainer.train()
    (step, _) = trainer.state.log_history
    assert step["tools/call_frequency"] == 1.0
    records = services.rollouts.load_step(0)
    assert [r.rollout.outcome for r in records] == [{"products": [42]}] * 2
    assert all(r.status == "scored" for r in records)
    for record in records:
        messages = record.rollout.messages or []
        assert messages[2] == {"role": "tool", "content": "42", "tool_call_id": "call_1_0"}
    # the judge read the environment's outcome after the episode
    judged = [parse_data_message(r["messages"][-1]["content"]) for r in fake_llm.requests]
    outputs = [d["rollout"]["output"] for d in judged if d.get("agent") == "scorer"]
    assert len(outputs) == 2
    assert all(o.endswith('outcome: {"products": [42]}') for o in outputs)


def test_two_steps_are_logged_under_the_trainers_steps(amaris: Any, tmp_path: Path) -> None:
    url, services = amaris()
    trainer = grpo_trainer(url, tmp_path / "out", max_steps=2)
    trainer.train()
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert [h["step"] for h in logged] == [1, 2]
    for step, history in enumerate(logged):
        # one prompt x two generations per step, logged under the step TRL was at
        records = services.rollouts.load_step(step)
        assert len(records) == 2
        assert {(r.step, r.metadata.get("current_step")) for r in records} == {(step, step)}
        assert {(r.rollout.supplemental_context, r.rollout.group_id) for r in records} == {
            ("42", "p0")
        }
        assert all(r.status == "scored" and r.score is not None for r in records)
        # the reward TRL logged for the step is the mean of what amaris logged for it
        mean = sum(r.score for r in records if r.score is not None) / len(records)
        assert history["reward"] == pytest.approx(mean)
    assert services.rollouts.load_step(2) == []


def test_standard_format_is_scored(amaris: Any, tmp_path: Path) -> None:
    url, services = amaris()
    trainer = grpo_trainer(url, tmp_path / "out")
    question = "What is 6 * 7?"
    inputs = [{"prompt": question, "answer": "42", "prompt_id": "p0"}] * 2
    completions = ["The answer is 42.", "The answer is 41."]
    rewards = trainer._calculate_rewards(inputs, [question] * 2, completions, [[1], [2]])
    assert rewards.flatten().tolist() == [1.0, 0.0]
    records = services.rollouts.load_step(0)
    assert sorted(r.rollout.output for r in records) == sorted(completions)
    assert {(r.rollout.input, r.rollout.supplemental_context) for r in records} == {
        (question, "42")
    }


def test_judge_outage_masks_the_step(amaris: Any, fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.default = lambda body: Reply(status=500)
    url, _ = amaris()
    trainer = grpo_trainer(url, tmp_path / "out")
    trainer.train()
    (step, _) = trainer.state.log_history
    # every sample unscored: rewards None -> NaN, advantages 0, no update, step counted
    assert step["reward"] is None
    assert step["amaris/unscored"] == 2.0
    assert step["loss"] == 0.0 and step["grad_norm"] == 0.0
    assert trainer.state.global_step == 1


def test_neutral_policy_trains_on_the_neutral_score(
    amaris: Any, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    fake_llm.default = lambda body: Reply(status=500)
    url, _ = amaris(**{"scoring.on_failure": "neutral", "scoring.neutral_score": 0.5})
    trainer = grpo_trainer(url, tmp_path / "out")
    trainer.train()
    (step, _) = trainer.state.log_history
    assert step["reward"] == 0.5
    assert step["amaris/unscored"] == 2.0
