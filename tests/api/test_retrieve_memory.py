"""The updater's history: ``retrieve-memory`` reads the step's own scope only."""

from __future__ import annotations

import asyncio
from pathlib import Path

from amaris.memory.models import MemoryDocument
from tasks.retrieve_memory import retrieve_memory
from tests.support.app import in_memory_app
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

HEDGE = "Rollouts hedge between two answers and still earn credit."


def test_dynamic_and_static_memory_stay_in_the_scope(tmp_path: Path) -> None:
    # Per-instance updates: input A's rubric must not be rewritten from input B's findings.
    app = in_memory_app(make_settings(tmp_path))
    with TestClient(app):
        # The tasks' context is registered by the pipeline's start-up, in its own thread; a
        # task called here waits for it as the pipeline's flows do (Runner.submit). Without
        # the wait, a loaded machine could run the task on the previous test's closed context.
        app.state.services.runner.ready.result(timeout=120)
        memory = app.state.services.memory
        memory.add_documents(
            [
                MemoryDocument(type="finding", step=1, scope="b", key="f1", text=HEDGE),
                MemoryDocument(type="batch_summary", step=1, scope="b", text="B's summary."),
                MemoryDocument(type="finding", step=2, scope="a", key="f1", text=HEDGE + " (A)"),
                MemoryDocument(type="batch_summary", step=2, scope="a", text="A's summary."),
                MemoryDocument(type="finding", step=3, scope="a", key="f1", text=HEDGE + " now"),
            ]
        )
        got = asyncio.run(retrieve_memory.fn(3, "a", ["hedging between answers"])).model_dump()
    # scope a's documents, never the current step's, never scope b's
    assert sorted((d["step"], d["text"]) for d in got["dynamic"]) == [
        (2, "A's summary."),
        (2, HEDGE + " (A)"),
    ]
    assert [(d["step"], d["text"]) for d in got["static"]] == [(2, "A's summary.")]
    assert got["queries"] == ["hedging between answers"]
