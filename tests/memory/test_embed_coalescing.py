"""Embedding calls from many threads: coalesced into few model calls, each caller getting
its own texts' vectors; criterion texts embedded once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from amaris.memory.coalesce import Coalescing, Remembered


class SlowModel:
    """Embeds a text as ``[len(text), index of the call]``; holds each call until released."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = threading.Event()

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        self.release.wait(5)
        return [[float(len(t)), float(len(self.calls))] for t in texts]


def test_concurrent_callers_share_model_calls_and_get_their_own_vectors() -> None:
    model = SlowModel()
    embed = Coalescing(model)
    texts = [["a" * n, "b" * (n + 100)] for n in range(1, 9)]
    with ThreadPoolExecutor(8) as pool:
        first = pool.submit(embed, texts[0])
        while not model.calls:  # the first call holds the model
            threading.Event().wait(0.001)
        rest = [pool.submit(embed, t) for t in texts[1:]]
        threading.Event().wait(0.2)  # the others queue behind it
        model.release.set()
        results = [first.result(5), *(f.result(5) for f in rest)]
    assert [[v[0] for v in r] for r in results] == [[len(a), len(b)] for a, b in texts]
    assert len(model.calls) == 2  # the first, then every queued caller's texts at once
    assert sorted(model.calls[1]) == sorted(t for pair in texts[1:] for t in pair)


def test_a_failed_model_call_fails_every_caller_it_served() -> None:
    def broken(texts: list[str]) -> list[list[float]]:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        Coalescing(broken)(["x"])
    assert Coalescing(broken)([]) == []


def test_remembered_embeds_each_text_once_and_forgets_the_oldest() -> None:
    calls: list[list[str]] = []

    def model(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return [[float(len(t))] for t in texts]

    embed = Remembered(model, size=2)
    assert embed(["aa", "b", "aa"]) == [[2.0], [1.0], [2.0]]
    assert embed(["b", "aa"]) == [[1.0], [2.0]]
    assert calls == [["aa", "b"]]
    embed(["ccc"])  # over the size: the least recently used ("b") goes
    assert embed(["b"]) == [[1.0]]
    assert calls[-1] == ["b"]


def test_a_model_call_takes_at_most_the_cap_and_every_caller_is_served() -> None:
    calls: list[list[str]] = []
    gate = threading.Lock()

    def model(texts: list[str]) -> list[list[float]]:
        with gate:
            calls.append(list(texts))
        threading.Event().wait(0.01)
        return [[float(len(t))] for t in texts]

    embed = Coalescing(model, most=5)
    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(embed, ["x" * n, "y" * n]) for n in range(1, 33)]
        results = [f.result(10) for f in futures]
    assert results == [[[float(n)], [float(n)]] for n in range(1, 33)]
    assert max(len(c) for c in calls) <= 5
    assert sum(len(c) for c in calls) == 64
