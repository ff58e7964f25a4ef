"""The real-model test server's batched decoding (``tests/support/real_llm_batch.py``): each
row of a batch gets the logits it would get decoded alone, through prefills of different
lengths, single tokens, drafted runs, refused drafts (holes) and rows that end early.

On a tiny random Llama (the real model's architecture), not the real model: cheap, and
the same code paths."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.support.real_llm_batch import Batch, Runner
from tests.support.real_llm_engine import SoloRunner, growing_cache

PREFIX = [5, 9, 2, 7, 11, 3]
"""The prompts' common prefix, in the batch's cache before its first pass."""

# Each row's passes after its prefill: ("run", tokens, keep) or ("crop", count).
SCRIPTS: list[list[tuple[Any, ...]]] = [
    [("run", [4], 1), ("run", [8, 1, 6], 3), ("crop", 2), ("run", [12], 1)],
    [("run", [3, 3], 2), ("run", [9], 1)],  # ends early: its row idles in the next passes
    [("crop", 0), ("run", [1], 1), ("run", [2, 5, 7, 9], 4), ("crop", 3), ("run", [6, 6], 1)],
]
PROMPTS = [[*PREFIX, 1, 2, 3, 4, 5], [*PREFIX, 8], [*PREFIX, 10, 13, 14]]


@pytest.fixture(scope="module")
def model() -> Any:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def _play(runner: Runner, prompt: list[int], script: list[tuple[Any, ...]]) -> list[Any]:
    seen = [runner.run(prompt[len(PREFIX) :], 1)]
    for op, *args in script:
        if op == "run":
            seen.append(runner.run(*args))
        elif args[0]:
            runner.crop(args[0])
    return seen


def test_every_row_of_a_batch_sees_what_it_would_see_alone(model: Any) -> None:
    with torch.inference_mode():
        alone = []
        for prompt, script in zip(PROMPTS, SCRIPTS, strict=True):
            cache = growing_cache(model.config.num_hidden_layers)
            model(input_ids=torch.tensor([PREFIX]), past_key_values=cache, use_cache=True)
            alone.append(_play(SoloRunner(model, cache), prompt, script))
        prefix = growing_cache(model.config.num_hidden_layers)
        model(input_ids=torch.tensor([PREFIX]), past_key_values=prefix, use_cache=True)
        batch = Batch(model, prefix, len(PREFIX), len(PROMPTS), growing_cache(2))

        def row(index: int, runner: Runner) -> list[Any]:
            with torch.inference_mode():
                return _play(runner, PROMPTS[index], SCRIPTS[index])

        together = batch.run(row)
    # One pass per step of the longest script: the prefills, then each row's next pass.
    assert batch.passes == 1 + max(sum(op == "run" for op, *_ in s) for s in SCRIPTS)
    for solo, batched in zip(alone, together, strict=True):
        assert [t.shape for t in solo] == [t.shape for t in batched]
        for a, b in zip(solo, batched, strict=True):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


def test_a_row_that_fails_fails_the_batch_after_the_others_end(model: Any) -> None:
    prefix = growing_cache(model.config.num_hidden_layers)
    with torch.inference_mode():
        model(input_ids=torch.tensor([PREFIX]), past_key_values=prefix, use_cache=True)
        batch = Batch(model, prefix, len(PREFIX), 2, growing_cache(2))
        finished: list[int] = []

        def row(index: int, runner: Runner) -> int:
            with torch.inference_mode():
                runner.run([1, 2], 1)
                if index == 0:
                    raise ValueError("row 0 failed")
                runner.run([3], 1)
                finished.append(index)
                return index

        with pytest.raises(ValueError, match="row 0 failed"):
            batch.run(row)
    assert finished == [1]
