"""Call amaris as OpenRLHF does: the Python-file reward function, then the HTTP remote
reward model (``--reward.remote_url http://127.0.0.1:8002/get_reward``)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import httpx

URL = os.environ.setdefault("AMARIS_URL", "http://127.0.0.1:8002")
PROMPT = "<|im_start|>user\nWhat is 6 * 7?<|im_end|>\n<|im_start|>assistant\n"
RESPONSES = ["6 * 7 = 42. The answer is 42.<|im_end|>", "The answer is 41.<|im_end|>"]
queries = [PROMPT + r for r in RESPONSES]
prompts = [PROMPT] * len(queries)
labels = ["42"] * len(queries)

# --reward.remote_url /path/to/reward_func.py: OpenRLHF loads reward_func from the file
spec = importlib.util.spec_from_file_location(
    "reward_func", Path(__file__).with_name("reward_func.py")
)
assert spec is not None and spec.loader is not None
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(module.reward_func(queries, prompts, labels))

# --reward.remote_url http://.../get_reward: OpenRLHF posts this body and reads "rewards"
answer = httpx.post(
    f"{URL}/get_reward", json={"query": queries, "prompts": prompts, "labels": labels}, timeout=600
)
answer.raise_for_status()
print(answer.json())
