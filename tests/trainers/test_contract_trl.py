"""TRL 1.16.0's own ``GRPOTrainer`` scoring with amaris: ``_calculate_rewards`` and steps.

A real ``GRPOTrainer`` (a one-layer Llama made from a config, the byte tokenizer of
tests/support/trainer_env.py, on CPU) with ``amaris_reward_func`` as its reward function: its
``_calculate_rewards`` (standard text, and conversational completions with tool calls,
their rewards compared with the same conversations scored directly), two real training
steps (generation, rewards, advantages, the update) logged under the trainer's own steps,
and a step during a judge outage.
Nothing is stubbed.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM
from trl import GRPOConfig, GRPOTrainer

from amaris.integrations.trl import amaris_reward_func
from amaris.sim.judge_server import Reply
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, serve_in_thread
from tests.support.settings import llm_settings
from tests.support.trainer_env import byte_tokenizer

pytestmark = [pytest.mark.trainer_contract, pytest.mark.slow]

PROMPT = [{"role": "user", "content": "What is 6 * 7? Use the calculator."}]
TOOL_CALL = {
    "type": "function",
    "function": {"name": "multiply", "arguments": {"a": 6, "b": 7}},
}
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


def score_directly(url: str, rollout_id: str, prompt: str, output: str) -> float:
    """``POST /score`` of one rollout (the answer "42", group "p0"): its reward."""
    rollout = {"id": rollout_id, "input": prompt, "output": output}
    rollout |= {"supplemental_context": "42", "group_id": "p0"}
    answer = httpx.post(f"{url}/score", json={"rollout": rollout}, timeout=60).json()
    assert answer["status"] == "scored", answer
    return float(answer["score"])


def test_tool_calls_reach_the_judge_as_text(amaris: Any, fake_llm: FakeLLM, tmp_path: Path) -> None:
    url, services = amaris()
    trainer = grpo_trainer(url, tmp_path / "out")
    assert importlib.metadata.version("trl") == "1.16.0"
    completions = [
        [
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "name": "multiply", "content": "42"},
            {"role": "assistant", "content": "The answer is 42."},
        ],
        [{"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]}],
    ]
    inputs = [{"prompt": PROMPT, "answer": "42", "prompt_id": "p0"}] * 2
    rewards = trainer._calculate_rewards(inputs, [PROMPT] * 2, completions, [[1], [2]])
    assert rewards.shape == (2, 1)
    call = 'tool call: multiply({"a": 6, "b": 7})'
    texts = [f"{call}\ntool result: 42\nThe answer is 42.", call]
    prompt = "user: What is 6 * 7? Use the calculator."
    records = services.rollouts.load_step(0)
    assert sorted((r.rollout.input, r.rollout.output) for r in records) == sorted(
        (prompt, text) for text in texts
    )
    judged = json.dumps([r["messages"] for r in fake_llm.requests])
    assert "tool call: multiply" in judged
    # The same conversations as text, scored by a second server (no shared cache): the
    # rewards TRL got are theirs, in order, and they tell the two apart.
    direct_url, _ = amaris("direct")
    direct = [score_directly(direct_url, f"direct-{i}", prompt, t) for i, t in enumerate(texts)]
    assert rewards.flatten().tolist() == direct
    assert direct[0] > direct[1]


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
