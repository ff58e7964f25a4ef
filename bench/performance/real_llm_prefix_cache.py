"""The real-model test server's prefix reuse (``tests/support/real_llm.py``): same greedy replies,
less time.

Four scorer-like requests sharing a long system prompt, decoded by the test server's
engine (SmolLM2-135M on one CPU thread) twice: each prompt computed whole, then with the
KV cache of the prefix the previous request shared. Prints both wall times, the prompt
tokens reused, and whether the replies are the same.

Usage::

    .venv/bin/python -m bench.performance.real_llm_prefix_cache
"""

from __future__ import annotations

import json
import time

import torch

from tests.support.real_llm import default_cache_dir, fetch_gguf, sample_rollouts
from tests.support.real_llm_engine import Engine

SCHEMA = {
    "type": "object",
    "properties": {
        "reason": {"type": "string", "maxLength": 120},
        "score": {"type": "integer", "enum": [0, 1, 2, 3, 4]},
    },
    "required": ["reason", "score"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "v", "strict": True, "schema": SCHEMA}}
SYSTEM = "You are a strict grader. " + (
    "Judge the answer against the rubric criterion: the answer is correct and shows its "
    "working. " * 12
)


def main() -> None:
    torch.set_num_threads(1)
    engine = Engine(fetch_gguf(default_cache_dir()), 8192)
    replies: dict[bool, list[tuple[str, int, str]]] = {}
    for reuse in (False, True):
        engine.forget_prefix()
        engine.cached_tokens = 0
        replies[reuse] = []
        started = time.perf_counter()
        for rollout in sample_rollouts(4, seed=1):
            if not reuse:
                engine.forget_prefix()
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": json.dumps(rollout)},
            ]
            out = engine.generate(messages, FORMAT, 60, 0.0, False, 1.1)
            replies[reuse].append((out.content, out.completion_tokens, out.finish_reason))
        print(
            f"prefix reuse {'on' if reuse else 'off'}: {time.perf_counter() - started:.1f} s, "
            f"{engine.cached_tokens} prompt tokens reused (prompts of {out.prompt_tokens})"
        )
    print("same replies:", replies[False] == replies[True])


if __name__ == "__main__":
    main()
