"""The real-model test server's batched decoding (``tests/support/real_llm_batch.py``): the
replies of decoding each request alone, in fewer forward passes and less CPU.

Scorer-like requests (a verdict in a strict schema, as in
:mod:`bench.performance.real_llm_jump_forward`; in ``json_object`` as the fallback test
sends them; and with a think block as the reasoning-style test's server), decoded by the
test server's engine (SmolLM2-135M on one CPU thread) one at a time, then in batches of
``--batch``. Prints per format the forward passes and CPU seconds (``time.process_time``:
every thread of the process) each way, and how many replies are the same.

Usage::

    .venv/bin/python -m bench.performance.real_llm_batch [--requests 8] [--batch 4]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from bench.performance.real_llm_jump_forward import SYSTEM, VERDICT, _format
from tests.support.real_llm import default_cache_dir, fetch_gguf, sample_rollouts
from tests.support.real_llm_engine import Engine, Generation

FORMATS: dict[str, tuple[dict[str, Any], bool]] = {
    "json_schema": (_format("verdicts", VERDICT), False),
    "json_object": ({"type": "json_object"}, False),
    "think + json_schema": (_format("verdicts", VERDICT), True),
}


def _reply(out: Generation) -> tuple[str, str | None, int, str]:
    return (out.content, out.reasoning, out.completion_tokens, out.finish_reason)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--formats", nargs="*", choices=list(FORMATS), default=list(FORMATS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    engine = Engine(fetch_gguf(default_cache_dir()), 8192)
    rollouts = sample_rollouts(args.requests, seed=1)
    engine.generate(
        [{"role": "user", "content": "Hi"}], None, 4, 0.0, False, 1.1
    )  # warm-up: first-call costs
    totals = {"alone": [0, 0.0], "batched": [0, 0.0]}
    same = 0
    for label in args.formats:
        response_format, think = FORMATS[label]
        prepared = [
            engine.prepare(
                [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": json.dumps(rollout)},
                ],
                response_format,
                192,
                0.0,
                think,
                1.1,
            )
            for rollout in rollouts
        ]
        replies: dict[str, list[Any]] = {}
        for way in ("alone", "batched"):
            engine.forget_prefix()
            passes, started = engine.forward_passes, time.process_time()
            outs: list[Generation] = []
            if way == "alone":
                for request in prepared:
                    outs.extend(engine.generate_many([request]))
            else:
                for start in range(0, len(prepared), args.batch):
                    outs.extend(engine.generate_many(prepared[start : start + args.batch]))
            seconds = time.process_time() - started
            passes = engine.forward_passes - passes
            totals[way][0] += passes
            totals[way][1] += seconds
            replies[way] = [_reply(out) for out in outs]
            tokens = sum(out.completion_tokens for out in outs)
            print(
                f"{label:>20} {way:>8}: {passes} forward passes, {seconds:.1f} s CPU, "
                f"{tokens} completion tokens",
                flush=True,
            )
        equal = sum(a == b for a, b in zip(replies["alone"], replies["batched"], strict=True))
        same += equal
        for a, b in zip(replies["alone"], replies["batched"], strict=True):
            if a != b:
                print("  differs:", a, "|", b)
        print(f"{label:>20} same replies: {equal} of {len(prepared)}", flush=True)
    for way, (passes, seconds) in totals.items():
        print(f"total {way}: {passes} forward passes, {seconds:.1f} s CPU")
    print(f"same replies: {same} of {len(rollouts) * len(args.formats)}")


if __name__ == "__main__":
    main()
