"""Call amaris as verl's reward manager calls ``reward.custom_reward_function`` (one sample at a
time, ``reward_kwargs`` as keyword arguments), then as its async reward loop does, for a text
sample and for a tool-calling episode of ``AmarisToolAgentLoop`` (examples/verl/agent_loop.yaml)."""

from __future__ import annotations

import asyncio
import os

from amaris.integrations.verl import compute_score, compute_score_async

URL = os.environ.get("AMARIS_URL", "http://127.0.0.1:8002")
# No step: verl's reward managers forward the trainer's (extra_info["global_steps"]), else
# amaris scores into the step it has open. anchor_ids: the reward-vector keys every answer
# has beside anchors and adaptive (the anchors of amaris's config.yaml: A1, A2, ...).
REWARD_KWARGS = {"url": URL, "high_level_goal": "math", "anchor_ids": ["A1"]}
# What a gsm8k preprocessing writes, plus the prompt amaris judges against.
EXTRA_INFO = {"split": "train", "index": 0, "question": "What is 6 * 7?"}

for solution in ("6 * 7 = 42. The answer is 42.", "The answer is 41."):
    print(compute_score("openai/gsm8k", solution, "42", EXTRA_INFO, **REWARD_KWARGS))


def episode(answer: str) -> dict[str, object]:
    """extra_info as verl's naive manager hands it over for an AmarisToolAgentLoop sample: the
    dataset's fields, the loop's record ("extras") and verl's turn count."""
    call = {"type": "function", "function": {"name": "multiply", "arguments": {"a": 6, "b": 7}}}
    messages = [
        {"role": "user", "content": "What is 6 * 7? Use the calculator."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": answer},
    ]
    extras = {"messages": messages, "finish_reason": "stop"}
    return {"split": "train", "index": 1, "extras": extras, "num_turns": 4}


async def reward_loop() -> None:
    texts = [
        compute_score_async(
            data_source="openai/gsm8k",
            solution_str=s,
            ground_truth="42",
            extra_info=EXTRA_INFO,
            **REWARD_KWARGS,
        )
        for s in ("The answer is 42.", "It is 42 or 43.")
    ]
    # an episode: amaris scores the chat with its tool call and result; solution_str (verl's
    # decoded response, tool output and template included) is not read
    episodes = [
        compute_score_async("openai/gsm8k", "", "42", episode(a), **REWARD_KWARGS)
        for a in ("So 6 * 7 = 42.", "So it is 7.")
    ]
    for result in await asyncio.gather(*texts, *episodes):
        print(result)


asyncio.run(reward_loop())
