"""The real-model test server's KV cache (``tests/support/real_llm_engine.py``,
``growing_cache``) holds what transformers' ``DynamicCache`` holds, through the engine's
uses: a prefill, single-token steps, crops (a refused draft, a shorter shared prefix) and
multi-token feeds, across the buffer's growth."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicCache

from tests.support import real_llm_engine
from tests.support.real_llm_engine import growing_cache

LAYERS, HEADS, DIM = 2, 3, 4


def _states(generator: torch.Generator, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (1, HEADS, tokens, DIM)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


@pytest.mark.parametrize("growth", [1, 3, 512])
def test_the_grown_cache_holds_what_dynamic_cache_holds(
    growth: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(real_llm_engine, "KV_GROWTH_TOKENS", growth)
    grown, dynamic = growing_cache(LAYERS), DynamicCache()
    generator = torch.Generator().manual_seed(0)
    # prefill 7, three steps, a crop of 2, a feed of 4, a crop of 5, a feed of 9
    for op in (7, 1, 1, 1, -2, 4, -5, 9):
        if op < 0:
            grown.crop(op)
            dynamic.crop(op)
            continue
        for layer in range(LAYERS):
            keys, values = _states(generator, op)
            got = grown.update(keys, values, layer)
            want = dynamic.update(keys.clone(), values.clone(), layer)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert grown.get_seq_length() == dynamic.get_seq_length()
    assert grown.get_seq_length() == 7 + 3 - 2 + 4 - 5 + 9
