"""Call amaris as TRL's GRPOTrainer calls an async reward function."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

from amaris.integrations.trl import amaris_reward_func

URL = os.environ.get("AMARIS_URL", "http://127.0.0.1:8002")
reward = amaris_reward_func(URL, high_level_goal="math assistant")
prompt = [{"role": "user", "content": "What is 6 * 7?"}]
completions = [
    [{"role": "assistant", "content": "The answer is 42."}],
    [{"role": "assistant", "content": "The answer is 41."}],
]
logged: dict[str, object] = {}
rewards = asyncio.run(
    reward(
        prompts=[prompt, prompt],
        completions=completions,
        answer=["42", "42"],
        prompt_id=["q0", "q0"],
        trainer_state=SimpleNamespace(global_step=0),
        log_extra=logged.__setitem__,
        log_metric=logged.__setitem__,
    )
)
print(reward.__name__, rewards, logged)
