"""What a user of the service sees of the judge's rate limits and cost: the wait in
``/metrics`` (``amaris_llm_rate_limit_wait_seconds_total{agent,kind}``, the waiting-calls
gauge), the dollars per agent (``amaris_llm_cost_usd_total{agent}``) and a step's
``cost_usd`` in ``GET /steps/{step}``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from amaris.offline.judge import respond
from amaris.sim.judge_server import Reply
from amaris.sim.usage import ledger_from_metrics, usage_summary
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.settings import llm_settings

PRICE = {"input_per_mtok": 3.0, "cached_input_per_mtok": 1.0, "output_per_mtok": 15.0}
DOLLARS = ((1200 - 1000) * 3.0 + 1000 * 1.0 + 80 * 15.0) / 1e6
"""One judge call of :func:`judged` at :data:`PRICE`."""


def judged(body: dict[str, Any]) -> Reply:
    return Reply(
        content=respond(body["messages"]),
        prompt_tokens=1200,
        completion_tokens=80,
        cached_tokens=1000,
    )


def item(index: int, step: int = 2) -> dict[str, Any]:
    rollout = {"id": f"r{index}", "input": "What is 2+2?", "output": f"4 ({index})"}
    return {"rollout": rollout, "metadata": {"current_step": step}}


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_calls_over_the_judges_rate_limit_wait_and_metrics_show_it(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = llm_settings(tmp_path, fake_llm, **{"client.scorer.requests_per_minute": 1200})
    with serve(settings) as client:
        before = samples(client.get("/metrics").text, "amaris_llm_rate_limit_wait_seconds_total")
        # every agent and kind from the start, at 0
        assert before[("agent", "updater"), ("kind", "tokens")] == 0
        assert set(before.values()) == {0.0}
        response = client.post("/batch_score", json={"items": [item(i) for i in range(30)]})
        assert [r["status"] for r in response.json()["results"]] == ["scored"] * 30
        text = client.get("/metrics").text
    waited = samples(text, "amaris_llm_rate_limit_wait_seconds_total")
    # 20 at once, the others waited for the scorer's 20 a second (0.05 s to 0.5 s each)
    assert waited[("agent", "scorer"), ("kind", "requests")] > 0.5
    assert waited[("agent", "scorer"), ("kind", "tokens")] == 0
    waiting = samples(text, "amaris_llm_rate_limit_waiting")
    assert waiting[(("agent", "scorer"),)] == 0


def test_a_steps_cost_is_its_calls_at_the_agents_price(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = judged
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{"agents.scorer.price": PRICE, "pipeline.rollouts_per_step": None},
    )
    with serve(settings) as client:
        client.post("/batch_score", json={"items": [item(i) for i in range(3)]})
        client.post("/batch_score", json={"items": [item(9, step=3)]})
        two = client.get("/steps/2").json()
        three = client.get("/steps/3").json()
        text = client.get("/metrics").text
    assert two["status"] == "open"
    assert two["cost_usd"] == pytest.approx(3 * DOLLARS)
    assert three["cost_usd"] == pytest.approx(DOLLARS)
    per_agent = samples(text, "amaris_llm_cost_usd_total")
    assert per_agent == {(("agent", "scorer"),): pytest.approx(4 * DOLLARS)}
    # the simulator reads the same dollars from the page for its report
    summary = usage_summary(ledger_from_metrics(text), 4, {})
    assert summary["cost"] == pytest.approx(4 * DOLLARS, abs=1e-6)
    assert summary["cost_per_1000_rollouts"] == pytest.approx(1000 * DOLLARS, abs=1e-6)


def test_without_a_price_no_cost_is_shown(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = judged
    with serve(llm_settings(tmp_path, fake_llm)) as client:
        client.post("/batch_score", json={"items": [item(0)]})
        assert client.get("/steps/2").json()["cost_usd"] is None
        text = client.get("/metrics").text
    assert samples(text, "amaris_llm_cost_usd_total") == {}
    assert usage_summary(ledger_from_metrics(text), 1, {})["cost"] is None
