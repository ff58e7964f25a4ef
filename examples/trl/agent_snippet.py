"""GRPOTrainer on an agent task, rewarded by amaris per objective (needs `pip install trl`
and transformers >= 5.2; not run by amaris's tests: tests/trainers/test_contract_trl.py
runs the same lines with a tiny model).

The policy calls the calculator environment's tool; TRL runs it and passes each episode
(the tool calls, the tool's answers, the final answer) to the reward functions, which send
it to amaris as a trajectory with the environment's outcome.
"""

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from amaris.integrations.trl import amaris_reward_funcs


class Calculator:
    """One rollout's environment (TRL makes one per rollout); its methods are the tools."""

    def reset(self, **example: object) -> None:
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


dataset = Dataset.from_list(
    [
        {
            "prompt": [{"role": "user", "content": "What is 6 * 7? Use the calculator."}],
            "answer": "42",
            "prompt_id": "q0",
        },
    ]
)
reward_funcs = amaris_reward_funcs(  # amaris, amaris_anchors, amaris_adaptive, amaris_A1
    "http://127.0.0.1:8002",
    anchor_ids=["A1"],  # the anchor_rubrics of amaris's configuration, in order
    high_level_goal="a calculator agent",
    trajectories=True,
    outcome=lambda env: {"calculator_calls": len(env.products)},
)
trainer = GRPOTrainer(
    model="Qwen/Qwen3-0.6B",  # a chat template TRL parses tool calls of
    reward_funcs=reward_funcs,
    args=GRPOConfig(
        output_dir="grpo-amaris-agent",
        num_generations=4,
        max_completion_length=512,
        reward_weights=[1.0, 0.5, 0.5, 0.0],  # in reward_funcs' order
    ),
    train_dataset=dataset,
    environment_factory=Calculator,
)
trainer.train()
