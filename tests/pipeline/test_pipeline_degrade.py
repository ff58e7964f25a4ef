"""A step completes with the evidence it has: a pipeline agent's permanent output failure
(invalid after the re-ask, cut by ``max_tokens``, context overflow) drops that piece and
is counted; a transient failure that outlasts the task retries still fails the step.

Real Prefect flows, the LLM faked at the gateway seam (tests/support/fake_llm.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from amaris.sim.judge_server import Reply
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_helpers import rollout, score_step, step_run_view
from tests.support.settings import llm_settings

BEHAVIOURS = ["correct", "wrong", "hacking", "correct"]
INVALID = Reply(content="I think this rollout is fine.")
CUT = Reply(content='{"executive_summary": {"summary": "The step', finish_reason="length")


def data_message(body: dict[str, Any]) -> str:
    """The message of a chat request that holds the data block (in a re-ask, an earlier
    message than the last)."""
    for message in reversed(body["messages"]):
        if "<<<AMARIS_DATA\n" in message["content"]:
            return str(message["content"])
    raise AssertionError("no data block")


def agent_of(body: dict[str, Any]) -> str:
    header = data_message(body).split("<<<AMARIS_DATA\n", 1)[1].split("\n", 1)[0]
    return str(json.loads(header)["agent"])


def calls(fake: FakeLLM) -> dict[str, int]:
    counts: dict[str, int] = {}
    for body in fake.requests:
        counts[agent_of(body)] = counts.get(agent_of(body), 0) + 1
    return counts


def replying(
    agent: str, reply: Reply, when: Callable[[dict[str, Any]], bool] = lambda body: True
) -> Callable[[dict[str, Any]], Reply]:
    """The offline judge, except ``reply`` for ``agent``'s requests that match ``when``."""

    def respond(body: dict[str, Any]) -> Reply:
        if agent_of(body) == agent and when(body):
            return reply
        return offline_reply(body)

    return respond


@pytest.fixture
def run_step(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[Callable[..., dict[str, Any]]]:
    """Score ``BEHAVIOURS`` as ``step`` through the fake judge, complete it, and answer
    its final ``/rubric_status/wait``."""

    def run(
        step: int, responder: Callable[[dict[str, Any]], Reply], **overrides: Any
    ) -> dict[str, Any]:
        settings = llm_settings(
            tmp_path,
            fake_llm,
            **{"pipeline.chunk_size": 2, "pipeline.task_retry_delays_seconds": [0.0], **overrides},
        )
        with serve(settings) as client:
            score_step(client, step, BEHAVIOURS)
            fake_llm.requests.clear()
            fake_llm.default = responder
            assert client.post("/complete", json={"step": step}).status_code == 200
            done: dict[str, Any] = client.get(
                "/rubric_status/wait", params={"step": step, "timeout": 120}
            ).json()
            done["rubric_version"] = client.get("/rubrics").json()["version"]
        return done

    try:
        yield run
    finally:
        fake_llm.default = offline_reply


def _run_view(step: int, since: datetime) -> tuple[list[str], dict[str, str]]:
    logs, artifacts = asyncio.run(step_run_view(f"step-{step}", since))
    return [log.message for log in logs], {a.key: str(a.data) for a in artifacts}


@pytest.mark.usefixtures("prefect_harness")
def test_an_invalid_analysis_is_dropped_and_the_step_completes(
    fake_llm: FakeLLM, run_step: Callable[..., dict[str, Any]]
) -> None:
    step, since = 61, datetime.now(UTC)
    unlucky = rollout(step, 1, BEHAVIOURS[1])["id"]
    done = run_step(step, replying("analyzer", INVALID, lambda body: unlucky in data_message(body)))
    assert done["status"] == "updated", done
    outcome = done["scopes"]["global"]
    assert outcome["outcome"] == "published", outcome
    [lost] = outcome["dropped"]
    assert (lost["agent"], lost["part"]) == ("analyzer", f"rollout {unlucky}")
    assert lost["reason"].startswith("LLMOutputError: analyzer: invalid output after re-ask")
    # asked, re-asked once, never retried by the task; the other agents all ran
    assert calls(fake_llm) == {
        "analyzer": len(BEHAVIOURS) + 1,
        "summarizer": 2,
        "meta_summarizer": 1,
        "query_generator": 1,
        "updater": 1,
        "scorer": 4,  # the rubric canary's sure set: reference (2), failing, phrase probe
    }
    # the summaries are of the other analyses
    assert not any(
        unlucky in data_message(b) for b in fake_llm.requests if agent_of(b) == "summarizer"
    )
    messages, artifacts = _run_view(step, since)
    assert f"step {step}: analyzer output for rollout {unlucky!r} dropped: {lost['reason']}" in (
        messages
    )
    assert f"step {step} ('global'): completed without 1 dropped output(s) (analyzer: 1)" in (
        messages
    )
    summary = artifacts[f"summary-step-{step}-global"]
    assert "## Dropped outputs (1)" in summary and f"rollout {unlucky}" in summary


@pytest.mark.usefixtures("prefect_harness")
def test_all_summaries_cut_by_max_tokens_end_the_step_without_an_update(
    fake_llm: FakeLLM, run_step: Callable[..., dict[str, Any]]
) -> None:
    step, since = 62, datetime.now(UTC)
    done = run_step(step, replying("summarizer", CUT))
    assert done["status"] == "unchanged", done
    outcome = done["scopes"]["global"]
    assert outcome["outcome"] == "no_update"
    assert outcome["reason"] == "no summary to update from: every summary was dropped"
    assert sorted((d["agent"], d["part"]) for d in outcome["dropped"]) == [
        ("summarizer", "chunk 0"),
        ("summarizer", "chunk 1"),
    ]
    assert all(
        d["reason"].startswith("LLMTruncatedError: summarizer: reply cut by max_tokens")
        for d in outcome["dropped"]
    )
    assert done["rubric_version"] == 1
    # a truncated reply is not re-asked, nor retried; nothing runs without a summary
    assert calls(fake_llm) == {"analyzer": len(BEHAVIOURS), "summarizer": 2}
    messages, artifacts = _run_view(step, since)
    assert any("no rubric update, no summary to update from" in m for m in messages)
    assert "**No summary:**" in artifacts[f"summary-step-{step}-global"]


@pytest.mark.usefixtures("prefect_harness")
def test_an_invalid_update_is_a_rejected_update(
    fake_llm: FakeLLM, run_step: Callable[..., dict[str, Any]]
) -> None:
    step, since = 63, datetime.now(UTC)
    done = run_step(step, replying("updater", INVALID))
    assert done["status"] == "rejected", done
    outcome = done["scopes"]["global"]
    assert outcome["outcome"] == "rejected"
    assert outcome["reason"].startswith("the updater's output was invalid (LLMOutputError")
    assert [d["agent"] for d in outcome["dropped"]] == ["updater"]
    assert outcome["version"] == outcome["base_version"] == done["rubric_version"] == 1
    assert calls(fake_llm)["updater"] == 2  # asked and re-asked, no task retry
    _, artifacts = _run_view(step, since)
    assert (
        "**Outcome:** rejected (the updater's output was invalid"
        in artifacts[f"rubric-diff-step-{step}-global"]
    )


@pytest.mark.usefixtures("prefect_harness")
def test_a_transient_failure_beyond_the_retries_still_fails_the_step(
    fake_llm: FakeLLM, run_step: Callable[..., dict[str, Any]]
) -> None:
    done = run_step(
        64,
        replying("summarizer", Reply(status=503)),
        **{"pipeline.task_retries": 2, "pipeline.chunk_size": len(BEHAVIOURS)},
    )
    assert done["status"] == "failed", done
    assert done["error"].startswith("LLMTransientError: summarizer: 1 attempts failed")
    # the one chunk's summary: the task run and its two retries (the pipeline's gateway
    # makes one attempt per run: the task's retries are its retry layer)
    assert calls(fake_llm)["summarizer"] == 3


@pytest.mark.usefixtures("prefect_harness")
def test_a_dropped_meta_summary_leaves_the_step_without_an_update(
    fake_llm: FakeLLM, run_step: Callable[..., dict[str, Any]]
) -> None:
    done = run_step(65, replying("meta_summarizer", INVALID))
    assert done["status"] == "unchanged", done
    outcome = done["scopes"]["global"]
    assert outcome["outcome"] == "no_update"
    assert outcome["reason"] == (
        "no summary to update from: the meta-summary of the 2 chunk summaries was dropped"
    )
    assert [(d["agent"], d["part"]) for d in outcome["dropped"]] == [("meta_summarizer", "all")]
    assert "query_generator" not in calls(fake_llm) and "updater" not in calls(fake_llm)
