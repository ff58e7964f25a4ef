"""The real-model test server's KV cache (``tests/support/real_llm_engine.py``): keys and
values grown in a buffer (``growing_cache``) against transformers' ``DynamicCache``
(``torch.cat`` of the whole cache at every step): the same greedy replies, less CPU.

The requests of :mod:`bench.performance.real_llm_jump_forward` (three scorer verdicts and an
analysis in amaris's strict schema fitted to 512 tokens), and that analysis again under
amaris's own analyzer prompt (a pipeline agent's context: ~1,500 prompt tokens), each
decoded by the test server's engine (SmolLM2-135M on one CPU thread) with each cache,
alternately, after one warm-up request. Prints per request and in total the forward passes
and CPU seconds, and whether the replies are the same.

Usage::

    .venv/bin/python -m bench.performance.real_llm_kv_cache
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers.cache_utils import DynamicCache

from amaris.agents.prompts import load_prompts
from amaris.settings import PromptsSettings
from bench.performance.real_llm_jump_forward import requests
from tests.support import real_llm_engine
from tests.support.real_llm import default_cache_dir, fetch_gguf
from tests.support.real_llm_engine import Engine, growing_cache

CACHES: dict[str, Any] = {
    "DynamicCache": lambda layers: DynamicCache(),
    "growing": growing_cache,
}


def main() -> None:
    torch.set_num_threads(1)
    engine = Engine(fetch_gguf(default_cache_dir()), 8192)
    replies: dict[str, list[tuple[str, int, str]]] = {name: [] for name in CACHES}
    totals = {name: [0, 0.0] for name in CACHES}
    cases = requests()
    label, messages, response_format, max_tokens = cases[-1]
    system = {"role": "system", "content": load_prompts(PromptsSettings())["analyzer"]}
    cases.append(("analysis, analyzer prompt", [system, messages[1]], response_format, 512))
    engine.generate(*cases[0][1:3], 8, 0.0, False, 1.2)  # warm-up: first-call costs
    for label, messages, response_format, max_tokens in cases:
        for name, make in CACHES.items():  # alternately: the machine's load falls on both
            real_llm_engine.growing_cache = make
            engine.forget_prefix()
            started = time.process_time()
            out = engine.generate(messages, response_format, max_tokens, 0.0, False, 1.2)
            seconds = time.process_time() - started
            totals[name][0] += out.forward_passes
            totals[name][1] += seconds
            replies[name].append((out.content, out.completion_tokens, out.finish_reason))
            print(
                f"{name:>12} {label}: {out.completion_tokens} tokens ({out.finish_reason}), "
                f"{out.forward_passes} forward passes, {seconds:.1f} s CPU",
                flush=True,
            )
    for name, (passes, cpu) in totals.items():
        print(f"{name:>12}: {passes} forward passes, {cpu:.1f} s CPU")
    print("same replies:", replies["DynamicCache"] == replies["growing"])


if __name__ == "__main__":
    main()
