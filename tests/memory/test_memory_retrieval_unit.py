"""The updater's history (``tasks.retrieve_memory``) over a real memory store (Qdrant in
memory, hashing embedder): the last summaries of the step's scope, and semantic hits
deduplicated, limited per query, never from the current step or another scope. Needs no
fixture of tests/conftest.py (mutation testing runs it with ``--noconftest``:
bench/evaluations/mutation.py ``memory_retrieval``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from amaris.app.wiring import build_services
from amaris.memory.models import MemoryDocument
from amaris.settings import load_settings
from amaris.steps.context import set_context
from tasks.retrieve_memory import retrieve_memory

HEDGE = "rollouts hedge between two answers and still earn credit"
VERBOSE = "long outputs pad the answer with restated questions"
TWO = "two answers between which outputs hedge"

DOCS = [
    *(
        MemoryDocument(type="batch_summary", step=s, scope="a", text=f"summary of step {s}")
        for s in (1, 2, 3, 5)
    ),
    MemoryDocument(type="finding", step=2, scope="a", key="hedge", text=HEDGE),
    MemoryDocument(type="finding", step=3, scope="a", key="verbose", text=VERBOSE),
    MemoryDocument(type="finding", step=4, scope="a", key="two", text=TWO),
    MemoryDocument(type="finding", step=6, scope="a", key="now", text=HEDGE + " now"),
    MemoryDocument(type="finding", step=1, scope="b", key="hedge", text=HEDGE + " in b"),
]


def retrieve(
    tmp_path: Path, step: int, queries: list[str], *, recent: int = 2, per_query: int = 3
) -> dict[str, Any]:
    """``retrieve-memory`` (its function, outside a flow) over a store holding ``DOCS``."""
    settings = load_settings(
        None,
        **{
            "memory.path": str(tmp_path / "data"),
            "memory.embedding_model": "hashing",
            "memory.static_memory_steps": recent,
            "memory.dynamic_memory_limit_per_query": per_query,
        },
    )
    services = build_services(settings, qdrant_location=":memory:")

    async def run() -> dict[str, Any]:
        await services.start()
        # The pipeline's start-up registers the tasks' context in its own thread: wait for
        # it, as the pipeline's flows do (Runner.submit).
        await asyncio.wrap_future(services.runner.ready)
        try:
            services.memory.add_documents(DOCS)
            return (await retrieve_memory.fn(step, "a", queries)).model_dump()
        finally:
            await services.stop()
            set_context(None)

    return asyncio.run(run())


def test_static_memory_is_the_last_summaries_before_the_step(tmp_path: Path) -> None:
    got = retrieve(tmp_path, 6, [], recent=2)
    assert got == {
        "static": [
            {"step": 3, "type": "batch_summary", "text": "summary of step 3"},
            {"step": 5, "type": "batch_summary", "text": "summary of step 5"},
        ],
        "dynamic": [],
        "queries": [],
    }
    assert [d["step"] for d in retrieve(tmp_path / "3", 5, [], recent=3)["static"]] == [1, 2, 3]


def test_dynamic_memory_is_deduplicated_scoped_and_never_the_current_step(
    tmp_path: Path,
) -> None:
    queries = ["hedge between two answers", "hedge between two answers", "long outputs pad"]
    got = retrieve(tmp_path, 6, queries, per_query=3)
    texts = [d["text"] for d in got["dynamic"]]
    assert len(texts) == len(set(texts))  # each document once
    assert HEDGE in texts and VERBOSE in texts
    assert HEDGE + " now" not in texts  # the current step's
    assert HEDGE + " in b" not in texts  # another scope's
    first = next(d for d in got["dynamic"] if d["text"] == HEDGE)
    assert first == {
        "type": "finding",
        "step": 2,
        "text": HEDGE,
        "score": first["score"],
        "query": "hedge between two answers",  # the first query that found it
    }
    assert all(d["score"] == round(d["score"], 4) for d in got["dynamic"])
    assert 0 < first["score"] <= 1
    assert any(d["score"] != round(d["score"], 3) for d in got["dynamic"])
    assert got["queries"] == queries
    assert got["dynamic"][0]["query"] == queries[0]
    assert {d["query"] for d in got["dynamic"]} <= {queries[0], queries[2]}


def test_the_limit_is_per_query_and_zero_turns_dynamic_memory_off(tmp_path: Path) -> None:
    got = retrieve(tmp_path, 6, ["hedge between two answers", "long outputs pad"], per_query=1)
    assert [(d["text"], d["query"]) for d in got["dynamic"]] == [
        (HEDGE, "hedge between two answers"),
        (VERBOSE, "long outputs pad"),
    ]
    off = retrieve(tmp_path / "off", 6, ["hedge between two answers"], per_query=0)
    assert off["dynamic"] == []
    assert [d["step"] for d in off["static"]] == [3, 5]


def test_a_hit_already_found_is_skipped_and_the_query_goes_on(tmp_path: Path) -> None:
    queries = ["hedge between two answers", HEDGE + " long outputs pad the answer"]
    got = retrieve(tmp_path, 6, queries, per_query=2)
    # The second query's best hit (HEDGE) was found by the first; its next one is new.
    assert [(d["text"], d["query"]) for d in got["dynamic"]] == [
        (HEDGE, queries[0]),
        (TWO, queries[0]),
        (VERBOSE, queries[1]),
    ]
