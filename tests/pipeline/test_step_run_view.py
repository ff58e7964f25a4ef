"""What a step's Prefect run shows: amaris's log lines for the step, and artifacts that
all have keys (no result-storage clutter)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.app import serve
from tests.support.pipeline_helpers import score_step, step_run_view
from tests.support.settings import make_settings

pytestmark = pytest.mark.usefixtures("prefect_harness")

BEHAVIOURS = ["correct"] * 4 + ["hacking"] * 4


@pytest.fixture(scope="module")
def step_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], list[Any]]:
    """One step (8 rollouts, 4 of them hacking) run as a Prefect flow: its logs, artifacts."""
    amaris = logging.getLogger("amaris")
    level = amaris.level
    amaris.setLevel(logging.INFO)  # as `amaris serve` logs by default (logging.level)
    try:
        settings = make_settings(
            tmp_path_factory.mktemp("view"), **{"pipeline.rollouts_per_step": None}
        )
        since = datetime.now(UTC)
        with serve(settings) as client:
            score_step(client, 1, BEHAVIOURS)
            assert client.post("/complete", json={}).json() == {"status": "complete"}
            done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
            assert done["status"] == "updated", done
            return asyncio.run(step_run_view("step-1", since))
    finally:
        amaris.setLevel(level)


def test_the_step_run_shows_amaris_log_lines(step_run: tuple[list[Any], list[Any]]) -> None:
    logs, _ = step_run
    ours = {log.message: log for log in logs if log.name.startswith("amaris.")}
    assert "step 1: 8 rollouts to analyse in 1 scope(s)" in ours
    analysed = ours[
        "step 1: chunk 0 analysed, 8 rollouts (0 from an earlier attempt, 0 dropped), "
        "4 flagged for reward hacking"
    ]
    assert analysed.task_run_id is not None  # attached to the analyze task run too
    assert "step 1 ('global'): rubric update published (CORRECTIVE), version 1 -> 2" in ours
    # the offline judge answers at once; its requests are counted all the same: the 8
    # rollouts scored, then 8 analyses, the summary, the memory queries, the update and
    # the rubric canary's 6 calls
    waited = [m for m in ours if m.startswith("step 1: waited ")]
    assert len(waited) == 1 and "(25 requests, " in waited[0], waited
    assert waited[0].endswith("; 0 failed, 0 of them timed out)"), waited


def test_the_step_run_artifacts_all_have_keys(step_run: tuple[list[Any], list[Any]]) -> None:
    _, artifacts = step_run
    assert [(a.type, a.description) for a in artifacts if not a.key] == []
    assert sorted({str(a.key) for a in artifacts}) == [
        "criteria-step-1",
        "hacking-step-1",
        "rubric-diff-step-1-global",
        "summary-step-1-global",
        "usage-step-1",
    ]
    # A busy Prefect server can store one write twice (its client retries): a key may
    # repeat with the same content, never with a second version from amaris.
    data: dict[str, set[str]] = {}
    for artifact in artifacts:
        data.setdefault(str(artifact.key), set()).add(str(artifact.data))
    assert all(len(versions) == 1 for versions in data.values()), data
