"""The real-model test server's drafted jump-forward (``tests/support/real_llm.py``): the
same greedy replies in fewer forward passes.

Requests shaped like the real-model tier's (a scorer verdict, and the analyzer's strict
schema fitted to the tier's 512-token cap by amaris's own
:func:`~amaris.llm.output_fit.fit_schema`), decoded by the test server's engine
(SmolLM2-135M on one CPU thread) twice: one forward pass per token the grammar leaves a
choice of (``Engine.draft`` off), then with the text the grammar forces drafted and
checked in one pass (on). Prints, per request and in total, the forward passes and the
CPU seconds of each, and whether the replies are the same.

Usage::

    .venv/bin/python -m bench.performance.real_llm_jump_forward
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch

from amaris.agents.schemas import IndividualAnalysis
from amaris.llm.output_fit import fit_schema
from amaris.llm.schema import strict_schema
from tests.support.real_llm import default_cache_dir, fetch_gguf, sample_rollouts
from tests.support.real_llm_engine import Engine

VERDICT = {
    "type": "object",
    "properties": {
        "verdicts": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "maxLength": 200},
                    "id": {"type": "string", "enum": ["A1"]},
                    "score": {"type": "integer", "enum": [0, 1, 2, 3, 4]},
                },
                "required": ["reason", "id", "score"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["verdicts"],
    "additionalProperties": False,
}
SYSTEM = "You judge a math answer against the rubric. Reply in JSON only."


def _format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


def requests() -> list[tuple[str, list[dict[str, str]], dict[str, Any], int]]:
    """(label, messages, response_format, max_tokens) of each request."""
    rollouts = sample_rollouts(3, seed=1)
    out = []
    for rollout in rollouts:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": json.dumps(rollout)},
        ]
        out.append((f"scorer {rollout['id']}", messages, _format("verdicts", VERDICT), 192))
    schema, fit = fit_schema(strict_schema(IndividualAnalysis), 512)
    assert fit.fits
    messages = [
        {"role": "system", "content": "Analyse this rollout in JSON."},
        {"role": "user", "content": json.dumps(rollouts[0])},
    ]
    out.append(("analysis", messages, _format("analysis", schema), 512))
    return out


def main() -> None:
    torch.set_num_threads(1)
    engine = Engine(fetch_gguf(default_cache_dir()), 8192)
    replies: dict[bool, list[tuple[str, int, str]]] = {}
    totals: dict[bool, tuple[int, float]] = {}
    for draft in (False, True):
        engine.draft = draft
        replies[draft] = []
        passes, cpu = 0, 0.0
        for label, messages, response_format, max_tokens in requests():
            engine.forget_prefix()
            started = time.process_time()
            out = engine.generate(messages, response_format, max_tokens, 0.0, False, 1.2)
            seconds = time.process_time() - started
            passes += out.forward_passes
            cpu += seconds
            replies[draft].append((out.content, out.completion_tokens, out.finish_reason))
            print(
                f"draft {'on ' if draft else 'off'} {label}: {out.completion_tokens} tokens "
                f"({out.finish_reason}), {out.forward_passes} forward passes, {seconds:.1f} s CPU",
                flush=True,
            )
        totals[draft] = (passes, cpu)
    for draft, (passes, cpu) in totals.items():
        print(f"draft {'on' if draft else 'off'}: {passes} forward passes, {cpu:.1f} s CPU")
    print("same replies:", replies[False] == replies[True])
    for (old, _, _), (new, _, _) in zip(replies[False], replies[True], strict=True):
        if old != new:
            print("differs:\n ", old, "\n ", new)


if __name__ == "__main__":
    main()
