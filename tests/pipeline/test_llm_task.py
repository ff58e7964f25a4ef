"""The LLM tasks' declaration (tasks/_common.py ``llm_task``): name, cache key, persisted
result, retry condition, and the retries of the pipeline in force, on the task itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefect import Task

from amaris.app.wiring import build_services
from amaris.settings import load_settings
from amaris.steps.context import set_context
from amaris.steps.retry import retry_on_transient
from tasks._common import LLMTask
from tasks.analyze import analyze_chunk
from tasks.generate_queries import generate_queries
from tasks.meta_summarize import meta_summarize
from tasks.summarize import summarize_chunk
from tasks.update_rubric import propose_update

LLM_TASKS: dict[str, LLMTask[..., object]] = {
    "analyze": analyze_chunk,
    "summarize": summarize_chunk,
    "meta-summarize": meta_summarize,
    "generate-queries": generate_queries,
    "update-rubric": propose_update,
}


def configured(tmp_path: Path, retries: int, delays: list[float]) -> dict[str, Task[..., object]]:
    """Each LLM task as it runs under ``pipeline.task_retries`` ``retries`` and
    ``pipeline.task_retry_delays_seconds`` ``delays`` (asked twice)."""
    settings = load_settings(
        None,
        **{
            "memory.path": str(tmp_path / "data"),
            "memory.embedding_model": "hashing",
            "pipeline.task_retries": retries,
            "pipeline.task_retry_delays_seconds": delays,
        },
    )
    services = build_services(settings, qdrant_location=":memory:")

    async def run() -> dict[str, Task[..., object]]:
        await services.start()  # registers the pipeline context
        try:
            first = {name: t.task for name, t in LLM_TASKS.items()}
            assert {name: t.task for name, t in LLM_TASKS.items()} == first  # built once
            return first
        finally:
            await services.stop()
            set_context(None)

    return asyncio.run(run())


def test_llm_tasks_carry_their_policy_and_the_pipeline_retries(tmp_path: Path) -> None:
    tasks = configured(tmp_path / "a", 2, [0.5, 4.0])
    for name, task in tasks.items():
        declared = LLM_TASKS[name].declared
        assert task.name == declared.name == name
        assert task.task_run_name == declared.task_run_name
        assert task.cache_key_fn is declared.cache_key_fn is not None
        assert task.persist_result is True
        assert task.retry_condition_fn is retry_on_transient
        assert (task.retries, task.retry_delay_seconds, task.retry_jitter_factor) == (
            2,
            [0.5, 4.0],
            0.2,
        )
    # another configuration in the same process: its own retries
    other = configured(tmp_path / "b", 0, [1.0])
    assert [(t.retries, t.retry_delay_seconds) for t in other.values()] == [(0, [1.0])] * 5
