"""Call amaris as verl's reward manager calls ``reward.custom_reward_function`` (one sample at a
time, ``reward_kwargs`` as keyword arguments), then as its async reward loop does."""

from __future__ import annotations

import asyncio
import os

from amaris.integrations.verl import compute_score, compute_score_async

URL = os.environ.get("AMARIS_URL", "http://127.0.0.1:8002")
# No step: verl's reward managers forward the trainer's (extra_info["global_steps"]), else
# amaris scores into the step it has open.
REWARD_KWARGS = {"url": URL, "high_level_goal": "math"}
# What a gsm8k preprocessing writes, plus the prompt amaris judges against.
EXTRA_INFO = {"split": "train", "index": 0, "question": "What is 6 * 7?"}

for solution in ("6 * 7 = 42. The answer is 42.", "The answer is 41."):
    print(compute_score("openai/gsm8k", solution, "42", EXTRA_INFO, **REWARD_KWARGS))


async def reward_loop() -> None:
    results = await asyncio.gather(
        *(
            compute_score_async(
                data_source="openai/gsm8k",
                solution_str=s,
                ground_truth="42",
                extra_info=EXTRA_INFO,
                **REWARD_KWARGS,
            )
            for s in ("The answer is 42.", "It is 42 or 43.")
        )
    )
    print(results)


asyncio.run(reward_loop())
