"""Batched decoding for the real-model test server (``tests/support/real_llm_engine.py``):
several requests share each forward pass, as vLLM's batching does.

A forward pass of the 135M model on a CPU is bound by reading its fp32 weights:
a batch of a few sequences, one new token each, costs about what one does. Each request
is decoded by the engine's own per-request loop in a thread of its own; its forward
passes (:meth:`Batch.run`'s ``runner.run``) wait until every request still decoding has
asked for its next one, and one pass of the model feeds them all.

The batch's KV cache has one row per request. Every row holds the prompts' common prefix
(computed once), then its own tokens; a pass feeds each row its tokens (a prefill, a
token, a drafted run), right-padded to the longest. Padding, and the drafted tokens a
request refuses (:meth:`Batch.crop`), stay in the cache as holes that the attention mask
hides; each row's position ids count its own tokens only, so a row sees what it would
see alone. The replies are greedy decoding's of each request alone, up to the float
rounding of a batched matrix product (tests/llm/test_real_llm_batch.py checks it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import torch

T = TypeVar("T")


class Runner(Protocol):
    """The forward passes of one request: its cache holds every token it fed so far."""

    def run(self, tokens: list[int], keep: int) -> Any:
        """Feed ``tokens``; the logits (float, ``[keep, vocabulary]``) at their last
        ``keep`` positions."""

    def crop(self, count: int) -> None:
        """Forget the last ``count`` tokens fed (a draft refused)."""


class _Row:
    """One request's :class:`Runner` inside a :class:`Batch`."""

    def __init__(self, batch: Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def run(self, tokens: list[int], keep: int) -> Any:
        return self._batch.ask(self._index, tokens, keep)

    def crop(self, count: int) -> None:
        self._batch.crop(self._index, count)


class Batch:
    """``rows`` requests decoded together over ``cache`` (a batch-of-one KV cache of the
    prompts' common prefix, ``prefix`` tokens; copied into every row of ``empty``, an empty
    cache the batch then holds, and left as it was)."""

    def __init__(self, model: Any, cache: Any, prefix: int, rows: int, empty: Any) -> None:
        self._model = model
        self._rows = rows
        self.cache = empty
        if prefix:
            for index, layer in enumerate(cache.layers):
                self.cache.layers[index].update(
                    layer.keys.repeat(rows, 1, 1, 1), layer.values.repeat(rows, 1, 1, 1)
                )
        self._mask = torch.ones((rows, prefix), dtype=torch.long)
        """1 where a row's cache holds one of its tokens, 0 at a hole."""
        self._lengths = [prefix] * rows
        """Tokens each row holds (the position id of its next one)."""
        self.passes = 0
        """Forward passes of the model run for the batch."""
        self._cond = threading.Condition()
        self._asks: dict[int, tuple[list[int], int]] = {}
        self._answers: dict[int, Any] = {}
        self._ready = [threading.Event() for _ in range(rows)]
        """Set when a row's pass ran (each row woken alone, not every row at each pass)."""
        self._active: set[int] = set()

    def run(self, decode: Callable[[int, Runner], T]) -> list[T]:
        """``decode(i, runner)`` for every row, each in a thread, their passes batched;
        the results in order. A row's exception is raised once every row has ended."""
        results: list[Any] = [None] * self._rows
        errors: list[BaseException] = []
        self._active = set(range(self._rows))

        def work(index: int) -> None:
            try:
                results[index] = decode(index, _Row(self, index))
            except BaseException as exc:
                errors.append(exc)
            finally:
                with self._cond:
                    self._active.discard(index)
                    self._cond.notify_all()

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(self._rows)]
        for thread in threads:
            thread.start()
        try:
            while True:
                with self._cond:
                    # Every row still decoding waits for its pass: one pass feeds them all.
                    while self._active and set(self._asks) != self._active:
                        self._cond.wait()
                    if not self._active:
                        break
                    asks, self._asks = self._asks, {}
                for index, answer in self._step(asks).items():
                    self._answers[index] = answer
                    self._ready[index].set()
        finally:
            for thread in threads:
                thread.join()
        if errors:
            raise errors[0]
        return results

    def ask(self, index: int, tokens: list[int], keep: int) -> Any:
        """Row ``index``'s pass: block until the batch's pass ran; its logits."""
        with self._cond:
            self._asks[index] = (tokens, keep)
            self._cond.notify_all()
        self._ready[index].wait()
        self._ready[index].clear()
        return self._answers.pop(index)

    def crop(self, index: int, count: int) -> None:
        """Hide row ``index``'s last ``count`` tokens (they become holes)."""
        held = torch.nonzero(self._mask[index]).flatten()
        self._mask[index, held[-count:]] = 0
        self._lengths[index] -= count

    def _step(self, asks: dict[int, tuple[list[int], int]]) -> dict[int, Any]:
        width = max(len(tokens) for tokens, _ in asks.values())
        input_ids = torch.zeros((self._rows, width), dtype=torch.long)
        fed = torch.zeros((self._rows, width), dtype=torch.long)
        positions = torch.zeros((self._rows, width), dtype=torch.long)
        for index in range(self._rows):
            tokens = asks[index][0] if index in asks else []
            input_ids[index, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            fed[index, : len(tokens)] = 1
            positions[index] = self._lengths[index] + torch.arange(width)
            self._lengths[index] += len(tokens)
        self._mask = torch.cat([self._mask, fed], dim=1)
        # The model's body, then its head at the positions asked for only (the prefill
        # of a batch is its longest prompt's length in every row).
        out = self._model.model(
            input_ids=input_ids,
            attention_mask=self._mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.passes += 1
        hidden = out.last_hidden_state
        picked = [
            hidden[index, len(tokens) - keep : len(tokens)]
            for index, (tokens, keep) in asks.items()
        ]
        logits = self._model.lm_head(torch.cat(picked)).float()
        answers = logits.split([keep for _, keep in asks.values()])
        return dict(zip(asks, answers, strict=True))
