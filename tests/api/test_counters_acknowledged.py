"""``/healthz`` ``counters`` and ``/metrics`` count the rollouts acknowledged: a rollout whose
durable write failed (answered 503 ``storage_unavailable``) is counted as ``unstored``, never
as scored, cached, degenerate or unscored, through ``/score`` and ``/batch_score`` alike.

The real app; the rollout log's writes are refused with ``ENOSPC`` while the test fills
the disk (the log's own write method, wrapped on the running app's instance).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from amaris.memory.records import RolloutRecord
from amaris.offline.judge import respond
from amaris.services import Services
from amaris.sim.judge_server import Reply
from tests.support.api import counters
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.settings import llm_settings
from tests.support.testclient import TestClient

ANSWERED = ("scored", "cached", "degenerate", "unscored")
"""The counters an acknowledged rollout is counted in, exactly one of them."""


class Disk:
    """Whether the simulated disk under the rollout log is full, or refuses the write of
    any of some rollouts (a write holding one of them is refused whole)."""

    def __init__(self) -> None:
        self.full = False
        self.refused: set[str] = set()


@contextmanager
def full_disk_seam(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    """The app's rollout log, its writes refused with ``ENOSPC`` as ``disk`` says."""
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    log = services.rollouts
    append_many = log.append_many
    disk = Disk()

    def refusing(items: Sequence[tuple[int, RolloutRecord]]) -> list[int]:
        if disk.full or any(record.rollout.id in disk.refused for _, record in items):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "rollout_log")
        return append_many(items)

    monkeypatch.setattr(log, "append_many", refusing)
    yield disk


def metrics(client: TestClient) -> dict[tuple[str, str], float]:
    """The samples of ``GET /metrics``, by name and the value of their one label (or "")."""
    text = client.get("/metrics").text
    return {
        (s.name, next(iter(s.labels.values()), "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if len(s.labels) <= 1
    }


def item(rid: str, output: str) -> dict[str, Any]:
    """A /score body (a batch item) of step 0."""
    rollout = {"id": rid, "input": "What is 2+2?", "output": output, "supplemental_context": "4"}
    return {"rollout": rollout, "metadata": {"current_step": 0}}


def score(client: TestClient, rid: str, output: str) -> dict[str, Any]:
    """``POST /score``: its status code (``code``) and its JSON body."""
    response = client.post("/score", json=item(rid, output))
    return {"code": response.status_code, **response.json()}


def test_a_rollout_the_disk_refused_is_unstored_not_scored(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = llm_settings(tmp_path, fake_llm, **{"gateway.max_attempts": 1})
    with serve(settings) as client, full_disk_seam(client, monkeypatch) as disk:
        answers = [score(client, "ok-scored", "The answer is 4.")]
        disk.full = True
        answers.append(score(client, "full-scored", "2 + 2 = 4, so the answer is 4."))
        answers.append(score(client, "full-cached", "The answer is 4."))
        answers.append(score(client, "full-degenerate", "..."))
        fake_llm.push(Reply(status=500))
        answers.append(score(client, "full-unscored", "It is 5."))
        disk.full = False
        fake_llm.push(Reply(status=500))
        answers.append(score(client, "ok-unscored", "It is 22."))
        answers.append(score(client, "ok-cached", "2 + 2 = 4, so the answer is 4."))
        seen = counters(client)
        samples = metrics(client)

    assert [a["code"] for a in answers] == [200, 503, 503, 503, 503, 200, 200]
    assert {a["error"] for a in answers if a["code"] == 503} == {"storage_unavailable"}
    stored = [a for a in answers if a["code"] == 200]
    assert [(a["rollout_id"], a["status"], a["cached"]) for a in stored] == [
        ("ok-scored", "scored", False),
        ("ok-unscored", "unscored", False),
        ("ok-cached", "scored", True),
    ]
    assert seen == {
        "scored": 1,
        "cached": 1,
        "unscored": 1,
        "unscored.judge_unavailable": 1,
        "unstored": 4,
    }
    assert sum(seen.get(name, 0) for name in ANSWERED) == 3
    assert samples[("amaris_rewards_total", "scored")] == 1
    assert samples[("amaris_rewards_total", "cached")] == 1
    assert samples[("amaris_rewards_total", "degenerate")] == 0
    assert samples[("amaris_rewards_total", "unscored")] == 1
    assert samples[("amaris_unscored_total", "judge_unavailable")] == 1
    assert samples[("amaris_rollouts_unstored_total", "")] == 4


def test_a_batch_the_disk_refused_counts_none_of_its_items(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = llm_settings(tmp_path, fake_llm, **{"gateway.max_attempts": 1})
    refused_items = [item("b0", "The answer is 4."), item("b1", "It is 5."), item("b2", "...")]
    with serve(settings) as client, full_disk_seam(client, monkeypatch) as disk:
        disk.full = True
        refused = client.post("/batch_score", json={"items": refused_items})
        after_refusal = counters(client)
        disk.full = False
        fake_llm.push(Reply(status=500))
        taken_items = [item("c0", "It is 22."), item("c1", "The answer is 4."), item("c2", "...")]
        taken = client.post("/batch_score", json={"items": taken_items})
        seen = counters(client)
        samples = metrics(client)

    assert refused.status_code == 503
    assert refused.json()["error"] == "storage_unavailable"
    assert after_refusal == {"unstored": 3}
    assert taken.status_code == 200
    statuses = sorted(r["status"] for r in taken.json()["results"])
    assert statuses == ["scored", "scored", "unscored"]
    assert seen == {
        "cached": 1,
        "degenerate": 1,
        "unscored": 1,
        "unscored.judge_unavailable": 1,
        "unstored": 3,
    }
    assert sum(seen.get(name, 0) for name in ANSWERED) == 3
    assert samples[("amaris_rewards_total", "degenerate")] == 1
    assert samples[("amaris_rollouts_unstored_total", "")] == 3


def test_a_batch_refused_for_one_items_write_counts_none_of_its_answers(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = llm_settings(tmp_path, fake_llm)
    # The judged item's write comes well after the degenerate one's, which is stored alone.
    fake_llm.push(lambda request: Reply(content=respond(request["messages"]), delay_s=0.5))
    items = [item("d0", "..."), item("j1", "The answer is 4.")]
    with serve(settings) as client, full_disk_seam(client, monkeypatch) as disk:
        disk.refused.add("j1")
        refused = client.post("/batch_score", json={"items": items})
        stored = client.get("/steps/0/rollouts").json()["records"]
        seen = counters(client)
        samples = metrics(client)

    assert refused.status_code == 503
    assert refused.json()["error"] == "storage_unavailable"
    assert [r["rollout"]["id"] for r in stored] == ["d0"]
    assert seen == {"unstored": 1}
    assert samples[("amaris_rewards_total", "degenerate")] == 0
    assert samples[("amaris_rollouts_unstored_total", "")] == 1
