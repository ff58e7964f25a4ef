"""What Prefect keeps of a step's LLM tasks: the models they return (persisted as their
cache), read back from the run's task states as those models, not as their JSON."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterName,
    FlowRunFilterStartTime,
)

from amaris.agents.schemas import BatchSummary, IndividualAnalysis, RubricUpdateProposal
from tasks.analyze import ChunkAnalyses
from tests.support.app import serve
from tests.support.pipeline_helpers import score_step
from tests.support.settings import make_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")

BEHAVIOURS = ["correct"] * 4 + ["hacking"] * 4
LLM_TASKS = ("analyze-", "summarize-", "meta-summarize-", "generate-queries-", "update-rubric-")
"""Task run names of the LLM tasks: the tasks whose results persist (the others' do not)."""
EXPECTED = {
    "analyze-0",
    "analyze-1",
    "summarize-global-chunk-0",
    "summarize-global-chunk-1",
    "meta-summarize-global-all",
    "generate-queries-global",
    "update-rubric-global",
}


async def task_results(
    name: str, since: datetime, expected: set[str], deadline_s: float = 60.0
) -> dict[str, object]:
    """The result of every completed LLM task run of the flow run ``name`` (started after
    ``since``), by task run name, read back from Prefect's result storage.

    The server records task run states as their events arrive: read again (up to
    ``deadline_s``) until the ``expected`` task runs show completed."""
    give_up = time.monotonic() + deadline_s
    async with get_client() as prefect:
        [run] = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[name]), start_time=FlowRunFilterStartTime(after_=since)
            )
        )
        while True:
            task_runs = await prefect.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))
            )
            completed = {
                t.name: t.state
                for t in task_runs
                if t.name.startswith(LLM_TASKS) and t.state is not None and t.state.is_completed()
            }
            if expected <= set(completed) or time.monotonic() > give_up:
                break
            await asyncio.sleep(0.5)
    return {name: await state.aresult() for name, state in completed.items()}


def test_the_llm_tasks_results_are_persisted_as_their_models(tmp_path: Path) -> None:
    # Two chunks of four: two chunk summaries, then the meta-summary of both.
    settings = make_settings(
        tmp_path, **{"pipeline.rollouts_per_step": None, "pipeline.chunk_size": 4}
    )
    since = datetime.now(UTC)
    with serve(settings) as client:
        score_step(client, 1, BEHAVIOURS)
        assert client.post("/complete", json={}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
        assert done["status"] == "updated", done
        results = asyncio.run(task_results("step-1", since, EXPECTED))
    chunks = [results[f"analyze-{i}"] for i in (0, 1)]
    assert all(isinstance(chunk, ChunkAnalyses) for chunk in chunks)
    analyses = [a for chunk in chunks if isinstance(chunk, ChunkAnalyses) for a in chunk.analyses]
    assert len(analyses) == 8 and all(isinstance(a, IndividualAnalysis) for a in analyses)
    for name in (
        "summarize-global-chunk-0",
        "summarize-global-chunk-1",
        "meta-summarize-global-all",
    ):
        assert isinstance(results[name], BatchSummary), (name, results[name])
    assert isinstance(results["update-rubric-global"], RubricUpdateProposal)
    queries = results["generate-queries-global"]
    assert isinstance(queries, list) and queries and all(isinstance(q, str) for q in queries)
    # the scope's outcome as the registry keeps it: JSON, with its Literal outcome
    assert done["scopes"]["global"]["outcome"] == "published"
    assert [b["tag"] for b in done["scopes"]["global"]["hacking"]]


async def task_run_starts(
    name: str, since: datetime, expected: set[str], deadline_s: float = 60.0
) -> dict[str, float]:
    """When each task run of the flow run ``name`` (started after ``since``) started, by
    its name (POSIX seconds); read again (up to ``deadline_s``) until the ``expected`` task
    runs are there: the server records them as their events arrive."""
    give_up = time.monotonic() + deadline_s
    async with get_client() as prefect:
        [run] = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[name]), start_time=FlowRunFilterStartTime(after_=since)
            )
        )
        while True:
            task_runs = await prefect.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))
            )
            starts = {
                t.name: t.start_time.timestamp() for t in task_runs if t.start_time is not None
            }
            if expected <= set(starts) or time.monotonic() > give_up:
                return starts
            await asyncio.sleep(0.2)


def test_a_chunk_starts_once_the_chunk_before_it_has_asked(tmp_path: Path) -> None:
    # Three chunks of four: the later chunks' task runs are set up while the first
    # chunk's calls are out, not ahead of them.
    settings = make_settings(
        tmp_path, **{"pipeline.rollouts_per_step": None, "pipeline.chunk_size": 4}
    )
    since = datetime.now(UTC)
    with serve(settings) as client:
        score_step(client, 1, BEHAVIOURS + ["correct"] * 4)
        assert client.post("/complete", json={}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
        assert done["status"] == "updated", done
        starts = asyncio.run(task_run_starts("step-1", since, {"analyze-1", "analyze-2"}))
    log = settings.memory.path / "logs" / "llm_calls.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    asked = sorted(r["time"] for r in records if r["agent"] == "analyzer" and r["step"] == 1)
    assert len(asked) == 12
    # Each chunk's four calls are asked before the next chunk's run starts.
    assert asked[3] <= starts["analyze-1"], (asked, starts)
    assert asked[7] <= starts["analyze-2"], (asked, starts)
