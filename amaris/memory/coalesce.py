"""Concurrent embedding calls from many threads, run as few model calls.

A model call has a fixed cost besides its texts' (tokenizer, Python, a small matmul): the
per_instance step's scopes each embed a few texts at once, from as many worker threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Vectors = list[list[float]]


@dataclass
class _Request:
    texts: list[str]
    vectors: Vectors = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False


class Coalescing:
    """``embed`` called by many threads: a caller that finds it busy queues its texts, and
    whichever caller runs it next embeds the queued texts in one call (group commit), up
    to ``most`` texts a call: a call stays short, and so does what a shutdown waits for."""

    def __init__(self, embed: Callable[[list[str]], Vectors], most: int = 64) -> None:
        self._embed = embed
        self._most = most
        self._running = threading.Lock()
        self._queue = threading.Lock()
        self._pending: list[_Request] = []

    def __call__(self, texts: Sequence[str]) -> Vectors:
        request = _Request(list(texts))
        if not request.texts:
            return []
        with self._queue:
            self._pending.append(request)
        while not request.done:
            with self._running:
                if not request.done:
                    self._run(self._take())
        if request.error is not None:
            raise request.error
        return request.vectors

    def _take(self) -> list[_Request]:
        """The oldest queued requests, up to ``most`` texts (one at least)."""
        with self._queue:
            taken, texts = 0, 0
            for request in self._pending:
                if taken and texts + len(request.texts) > self._most:
                    break
                taken, texts = taken + 1, texts + len(request.texts)
            batch, self._pending = self._pending[:taken], self._pending[taken:]
        return batch

    def _run(self, batch: list[_Request]) -> None:
        try:
            vectors = self._embed([text for r in batch for text in r.texts])
        except BaseException as exc:  # every caller of the batch gets the failure
            for r in batch:
                r.error, r.done = exc, True
            return
        start = 0
        for r in batch:
            r.vectors, r.done = vectors[start : start + len(r.texts)], True
            start += len(r.texts)


class Remembered:
    """``embed`` with the vectors of the last ``size`` distinct texts kept: the guardrails
    embed the same criteria (the anchors, the rubric in force) for every update."""

    def __init__(self, embed: Callable[[list[str]], Vectors], size: int = 4096) -> None:
        self._embed = embed
        self._size = size
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, list[float]] = OrderedDict()

    def __call__(self, texts: Sequence[str]) -> Vectors:
        with self._lock:
            known = {t: self._kept[t] for t in texts if t in self._kept}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            known.update(zip(missing, self._embed(missing), strict=True))
        with self._lock:
            for text in dict.fromkeys(texts):
                self._kept[text] = known[text]
                self._kept.move_to_end(text)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return [known[t] for t in texts]
