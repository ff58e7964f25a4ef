"""Call amaris as TRL's GRPOTrainer calls its async reward functions: a text batch, then an
agent batch (tool-calling episodes, as TRL passes them with ``tools`` or
``environment_factory``) rewarded per objective."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

from amaris.integrations.trl import amaris_reward_func, amaris_reward_funcs

URL = os.environ.get("AMARIS_URL", "http://127.0.0.1:8002")
state = SimpleNamespace(global_step=0)  # TRL's trainer_state
logged: dict[str, object] = {}

# Text: one scalar reward function.
reward = amaris_reward_func(URL, high_level_goal="math assistant")
prompt = [{"role": "user", "content": "What is 6 * 7?"}]
completions = [
    [{"role": "assistant", "content": "The answer is 42."}],
    [{"role": "assistant", "content": "The answer is 41."}],
]
rewards = asyncio.run(
    reward(
        prompts=[prompt, prompt],
        completions=completions,
        answer=["42", "42"],
        prompt_id=["q0", "q0"],
        trainer_state=state,
        log_extra=logged.__setitem__,
        log_metric=logged.__setitem__,
    )
)
print(reward.__name__, rewards, logged)

# Agent episodes: TRL's form of a tool call (arguments a dict, no id) and of the tool's
# answer (its name, no tool_call_id); ``environments`` is what environment_factory made.
call = {"type": "function", "function": {"name": "multiply", "arguments": {"a": 6, "b": 7}}}
episodes = [
    [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "multiply", "content": "42"},
        {"role": "assistant", "content": "6 * 7 = 42."},
    ],
    [{"role": "assistant", "content": "6 * 7 = 41."}],
]
environments = [SimpleNamespace(products=[42]), SimpleNamespace(products=[])]
funcs = amaris_reward_funcs(  # amaris, amaris_anchors, amaris_adaptive, amaris_A1
    URL,
    anchor_ids=["A1"],
    high_level_goal="calculator agent",
    trajectories=True,
    outcome=lambda env: {"calculator_calls": len(env.products)},
)


async def agent_batch() -> list[list[float | None]]:
    """Every function on the batch at once, as GRPOTrainer runs async reward functions:
    one amaris call for all of them."""
    calls = [
        func(
            prompts=[prompt, prompt],
            completions=episodes,
            answer=["42", "42"],
            prompt_id=["q1", "q1"],
            trainer_state=state,
            environments=environments,
        )
        for func in funcs
    ]
    return list(await asyncio.gather(*calls))


for func, values in zip(funcs, asyncio.run(agent_batch()), strict=True):
    print(func.__name__, values)
