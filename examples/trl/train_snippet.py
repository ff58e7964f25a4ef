"""The GRPOTrainer lines (needs `pip install trl`; not run by amaris's tests)."""

from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from amaris.integrations.trl import amaris_reward_func

dataset = Dataset.from_list(
    [
        {
            "prompt": [{"role": "user", "content": "What is 6 * 7?"}],
            "answer": "42",
            "prompt_id": "q0",
        },
    ]
)
trainer = GRPOTrainer(
    model="Qwen/Qwen2.5-0.5B-Instruct",
    reward_funcs=[amaris_reward_func("http://127.0.0.1:8002", high_level_goal="math")],
    args=GRPOConfig(output_dir="grpo-amaris", num_generations=4),
    train_dataset=dataset,
)
trainer.train()
