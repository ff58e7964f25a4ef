"""per_instance steps: scopes batched into task runs, so a step's task runs grow with its
rollouts' chunks, not with its prompts."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterName,
    FlowRunFilterStartTime,
)

from amaris.memory.records import RolloutRecord
from amaris.rubric.scopes import input_id
from amaris.sim.judge_server import Reply
from flows.scope_batches import ScopeWork, scope_batches
from tests.support.agents import agent_of, calls_by_agent
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_helpers import metadata
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

pytestmark = pytest.mark.usefixtures("prefect_harness")

PROMPTS = 24
CHUNK = 4
PER_SCOPE = (
    "analyze-",
    "summarize-",
    "meta-summarize-",
    "generate-queries-",
    "retrieve-memory-",
    "update-rubric-",
    "rubric-canary-",
    "publish-rubric-",
    "remember-",
)
"""The task runs a scope's stages have of their own, outside a batch."""


def prompt_rollout(n: int) -> dict[str, str]:
    a, b = 11 + n, 17 + n
    return {
        "id": f"p{n}",
        "input": f"What is {a} * {b}?",
        "output": f"{a} * {b} = {a * b}. The answer is {a * b}.",
        "supplemental_context": f"Answer: {a * b}",
    }


async def step_task_runs(step: int, since: datetime, batches: int) -> tuple[list[str], list[str]]:
    """The names of the task runs and the keys of the artifacts of flow run ``step-<step>``,
    read again (up to a deadline) until its ``batches`` scope batches are there: the server
    stores task runs as their events arrive."""
    give_up = time.monotonic() + 30.0
    async with get_client() as prefect:
        runs = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[f"step-{step}"]),
                start_time=FlowRunFilterStartTime(after_=since),
            )
        )
        assert len(runs) == 1
        while True:
            tasks = await prefect.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[runs[0].id]))
            )
            found = sum(t.name.startswith("scopes-") for t in tasks)
            if found >= batches or time.monotonic() > give_up:
                break
            await asyncio.sleep(0.2)
        artifacts = await prefect.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[runs[0].id]))
        )
    return [t.name for t in tasks], [a.key or "" for a in artifacts]


async def test_per_instance_task_runs_grow_with_chunks_not_prompts(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, **{"memory.rubrics_mode": "per_instance", "pipeline.chunk_size": CHUNK}
    )
    since = datetime.now(UTC)
    items = [{"rollout": prompt_rollout(n), "metadata": metadata(1)} for n in range(PROMPTS)]
    with TestClient(in_memory_app(settings)) as client:
        assert client.post("/batch_score", json={"items": items}).status_code == 200
        assert client.post("/complete", json={"step": 1}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
    assert done["status"] in ("updated", "unchanged")
    assert set(done["scopes"]) == {input_id(i["rollout"]["input"]) for i in items}
    assert all(s["rollouts"] == 1 for s in done["scopes"].values())
    names, keys = await step_task_runs(1, since, PROMPTS // CHUNK)
    # one task run per batch of CHUNK rollouts; none per prompt and stage
    assert Counter(name.rsplit("-", 1)[0] for name in names)["scopes"] == PROMPTS // CHUNK
    assert not [name for name in names if name.startswith(PER_SCOPE)]
    assert len(names) < PROMPTS
    assert sum(key.startswith("scopes-step-1-") for key in keys) == PROMPTS // CHUNK
    assert not any(key.startswith(("summary-step-1-", "rubric-diff-step-1-")) for key in keys)


def work(scope: str, rollouts: int) -> ScopeWork:
    records = cast(list[RolloutRecord], [None] * rollouts)  # only counted
    return ScopeWork.model_construct(scope=scope, records=records, history=[])


def test_scope_batches_hold_whole_scopes_up_to_the_chunk_size() -> None:
    works = [work("a", 2), work("b", 2), work("c", 1), work("d", 5), work("e", 3)]
    batches = scope_batches(works, 4)
    assert [[w.scope for w in batch] for batch in batches] == [["a", "b"], ["c"], ["d"], ["e"]]
    assert scope_batches([], 4) == []


@contextmanager
def failed_step(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[TestClient]:
    """A per-instance service whose step 1 (``PROMPTS`` prompts, batches of ``CHUNK``) was
    scored, completed and answered ``failed``."""
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "memory.rubrics_mode": "per_instance",
            "pipeline.chunk_size": CHUNK,
            "memory.embedding_model": "hashing",
        },
    )
    items = [{"rollout": prompt_rollout(n), "metadata": metadata(1)} for n in range(PROMPTS)]
    with TestClient(in_memory_app(settings)) as client:
        assert client.post("/batch_score", json={"items": items}).status_code == 200
        assert client.post("/complete", json={"step": 1}).json() == {"status": "complete"}
        failed = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120})
        assert failed.json()["status"] == "failed"
        yield client


def test_a_failed_batch_is_rerun_alone_and_the_others_reused(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    broken = f'"{prompt_rollout(PROMPTS - 1)["id"]}"'  # in the last batch

    def summarizer_down_for_one(body: dict[str, Any]) -> Reply:
        failing = agent_of(body) == "summarizer" and broken in body["messages"][-1]["content"]
        return Reply(status=400) if failing else offline_reply(body)

    fake_llm.default = summarizer_down_for_one
    try:
        with failed_step(tmp_path, fake_llm) as client:
            first = calls_by_agent(fake_llm)
            assert first["analyzer"] == PROMPTS
            fake_llm.default = offline_reply
            fake_llm.requests.clear()
            assert client.post("/complete", json={"step": 1}).json() == {"status": "complete"}
            done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
            assert done["status"] in ("updated", "unchanged")
            assert len(done["scopes"]) == PROMPTS
            # only the failed batch ran again: its analyses were kept, its summaries and
            # updates asked anew; no query generation in per_instance mode
            again = calls_by_agent(fake_llm)
            assert again.get("analyzer", 0) == 0
            assert again["summarizer"] == again["updater"] == CHUNK
            assert "query_generator" not in first and "query_generator" not in again
    finally:
        fake_llm.default = offline_reply


def test_a_failed_step_answers_once_no_batch_runs_on(tmp_path: Path, fake_llm: FakeLLM) -> None:
    broken = f'"{prompt_rollout(PROMPTS - 1)["id"]}"'  # in the last batch
    slow = f'"{prompt_rollout(0)["id"]}"'  # in the first batch

    def one_fails_one_is_slow(body: dict[str, Any]) -> Reply:
        content = body["messages"][-1]["content"]
        if agent_of(body) == "summarizer" and broken in content:
            return Reply(status=400)
        reply = offline_reply(body)
        if agent_of(body) == "summarizer" and slow in content:
            return dataclasses.replace(reply, delay_s=1.5)
        return reply

    fake_llm.default = one_fails_one_is_slow
    try:
        with failed_step(tmp_path, fake_llm):
            at_answer = calls_by_agent(fake_llm)
            # the slow batch's updates were asked before the answer, not after it
            assert at_answer["updater"] == PROMPTS - 1
            time.sleep(2.0)
            assert calls_by_agent(fake_llm) == at_answer
    finally:
        fake_llm.default = offline_reply
