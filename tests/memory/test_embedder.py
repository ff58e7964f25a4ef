"""Embedders: the real local MiniLM, feature hashing, and the configuration switch."""

from __future__ import annotations

import base64
import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request

from amaris.memory.embedder import (
    EmbedderConfigError,
    HashingEmbedder,
    MiniLMEmbedder,
    OpenAIEmbedder,
    build_embedder,
    preload,
)
from tests.support.app import in_memory_app
from tests.support.fake_llm import serve_in_thread
from tests.support.memory_helpers import minilm
from tests.support.settings import make_settings
from tests.support.testclient import TestClient


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_minilm_ranks_related_text_above_unrelated() -> None:
    embedder = minilm()
    query, related, unrelated, weather = embedder.embed(
        [
            "the model gives several answers to game the grader",
            "policy hedges between multiple candidate answers",
            "the response is polite and short",
            "it is sunny in Paris today",
        ]
    )
    assert (embedder.dim, embedder.name) == (384, "all-MiniLM-L6-v2")
    assert len(query) == 384
    assert math.isclose(_dot(query, query), 1.0, abs_tol=1e-5)  # normalised
    # It shares one word with the query, yet is the nearest: the match is semantic.
    assert _dot(query, related) > _dot(query, unrelated) > _dot(query, weather)


def test_minilm_is_deterministic_and_handles_empty_input() -> None:
    embedder = minilm()
    first, second = embedder.embed(["verbosity padding", "verbosity padding"])
    assert first == second
    assert embedder.embed([]) == []
    assert MiniLMEmbedder().embed([]) == []  # nothing to embed: no load needed


LOAD_WAIT_S = 300.0
"""Generous bound of a wait for MiniLM to load (never part of an assertion)."""


def test_the_service_loads_minilm_in_the_background_from_its_start(tmp_path: Path) -> None:
    """The first step's memory retrieval must not pay for the load."""
    embedder = MiniLMEmbedder()
    settings = make_settings(tmp_path, **{"memory.embedding_model": None})
    with TestClient(in_memory_app(settings, embedder=embedder)) as c:
        assert c.get("/healthz").status_code == 200
        # Nothing was embedded, yet the model is (being) loaded: the start began it.
        assert embedder.wait_loaded(LOAD_WAIT_S)


def test_a_use_during_the_background_load_waits_for_it() -> None:
    embedder = MiniLMEmbedder()
    preload(embedder)
    preload(embedder)  # once
    (vector,) = embedder.embed(["reward hacking by hedging"])  # waits, loads nothing itself
    assert len(vector) == 384
    assert embedder.wait_loaded(LOAD_WAIT_S)
    assert vector == minilm().embed(["reward hacking by hedging"])[0]
    preload(HashingEmbedder())  # nothing to load: a no-op


def test_hashing_embedder_is_deterministic_normalised_and_lexical() -> None:
    embedder = HashingEmbedder()
    a, b, c = embedder.embed(["Hedging between answers", "hedging between answers!", "cats"])
    assert (embedder.dim, embedder.name, len(a)) == (384, "hashing-384", 384)
    assert a == b  # case and punctuation do not matter
    assert a == HashingEmbedder().embed(["Hedging between answers"])[0]  # stable hash
    assert math.isclose(_dot(a, a), 1.0, abs_tol=1e-9)
    assert _dot(a, c) < _dot(a, embedder.embed(["hedging answers"])[0])
    assert len(HashingEmbedder(dim=16).embed(["x"])[0]) == 16
    empty = embedder.embed([""])[0]
    assert math.isclose(_dot(empty, empty), 1.0, abs_tol=1e-9)


def test_build_embedder_follows_the_configuration(tmp_path: Path) -> None:
    def build(model: str | None) -> object:
        settings = make_settings(
            tmp_path,
            **{
                "memory.embedding_model": model,
                "client.default.api_key": "k",
                "client.default.base_url": "http://127.0.0.1:9/v1",
            },
        )
        return build_embedder(settings.memory, settings.client)

    assert isinstance(build(None), MiniLMEmbedder)
    assert isinstance(build("all-MiniLM-L6-v2"), MiniLMEmbedder)
    assert isinstance(build("hashing"), HashingEmbedder)
    openai = build("openai:text-embedding-3-small")
    assert isinstance(openai, OpenAIEmbedder)
    assert openai.name == "openai:text-embedding-3-small"
    with pytest.raises(EmbedderConfigError, match="'openai:<model>'"):
        build("word2vec")
    with pytest.raises(EmbedderConfigError):
        build("openai:")


def test_openai_embedder_learns_its_dimension() -> None:
    calls: list[list[str]] = []
    app = FastAPI()

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> dict[str, Any]:
        body = await request.json()
        calls.append(body["input"])
        data = []
        for index in reversed(range(len(body["input"]))):  # out of order: sorted by index
            vector = [float(index), 1.0, 0.0]
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                embedding = base64.b64encode(struct.pack("<3f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return {"object": "list", "model": body["model"], "data": data, "usage": usage}

    with serve_in_thread(app) as url:
        embedder = OpenAIEmbedder("m", api_key="k", base_url=f"{url}/v1")
        assert embedder.embed(["a", ""]) == [[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]  # by index
        assert calls == [["a", " "]]  # empty strings are not sent
        assert embedder.dim == 3
        assert len(calls) == 1  # learnt from the answer, not asked again
    assert OpenAIEmbedder("m", dim=7).dim == 7


LOAD_AND_EXIT = """
import sys
from amaris.memory.embedder import MiniLMEmbedder

embedder = MiniLMEmbedder()
embedder.load()
assert len(embedder.embed(["a sentence"])[0]) == 384
print(sorted(name for name in sys.modules if name.split(".")[0] == "triton" and sys.modules[name]))
"""


@pytest.mark.slow
def test_the_embedder_loads_no_gpu_toolchain_and_exits_quietly() -> None:
    # torch would import triton (a GPU compiler) on the way to the model, and at exit its
    # bindings would print nanobind leak warnings: after every `amaris serve`.
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AND_EXIT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert "nanobind" not in done.stderr and "leaked" not in done.stderr, done.stderr
