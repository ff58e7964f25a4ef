"""The token and cost ledger: every response's ``usage`` counted per agent and model, in
``/metrics``, the LLM call log, each step's Prefect artifact and the simulator's report."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from amaris.llm.ledger import TokenLedger, Usage, cost, dollars, usage_of
from amaris.llm.providers import parse_completion
from amaris.offline.judge import respond
from amaris.settings import ConfigError, ModelPrice, TokenPrice, load_settings
from amaris.sim.driver import RolloutResult, RunResult, StepResult
from amaris.sim.judge_server import Reply
from amaris.sim.report import write_report
from amaris.sim.usage import ledger_from_metrics
from flows.artifacts import usage_markdown
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.pipeline_helpers import metadata, rollout, score_step
from tests.support.settings import llm_settings
from tests.support.step_runs import unchanged

MODEL = "judge-7b"
RATE = ModelPrice(prompt=2.0, cached_prompt=0.5, completion=8.0)
PRICING = {MODEL: {"prompt": 2.0, "cached_prompt": 0.5, "completion": 8.0}}
USAGE_BODY = b'{"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}'


def judged(
    prompt: int,
    completion: int,
    reasoning: int | None = None,
    cached: int | None = None,
    usage: bool = True,
) -> Any:
    """A scripted reply: the offline judge's verdict with this ``usage``."""

    def reply(body: dict[str, Any]) -> Reply:
        return Reply(
            content=respond(body["messages"]),
            prompt_tokens=prompt,
            completion_tokens=completion,
            reasoning_tokens=reasoning,
            cached_tokens=cached,
            usage=usage,
        )

    return reply


def samples(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {
        frozenset(s.labels.items()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_metrics_equal_the_sums_of_the_scripted_usage(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{"gateway.max_attempts": 1, "agents.default.model": MODEL, "pricing": PRICING},
    )
    fake_llm.push(
        judged(1200, 90, reasoning=30, cached=1024),
        judged(1300, 70, cached=1152),
        judged(0, 0, usage=False),  # a server that sends no usage: a call, no tokens
        Reply(status=500),
    )
    with serve(settings) as client:
        statuses = [
            client.post(
                "/score", json={"rollout": rollout(0, i, "correct"), "metadata": metadata(0)}
            ).json()["status"]
            for i in range(4)
        ]
        text = client.get("/metrics").text
    assert statuses == ["scored", "scored", "scored", "unscored"]
    scorer = {("agent", "scorer"), ("model", MODEL)}

    def one(name: str, **labels: str) -> float:
        return samples(text, name)[frozenset(scorer | set(labels.items()))]

    assert one("amaris_llm_model_calls_total") == 3
    assert one("amaris_llm_model_failed_total") == 1
    assert one("amaris_llm_tokens_total", kind="prompt") == 2500
    assert one("amaris_llm_tokens_total", kind="completion") == 160
    assert one("amaris_llm_tokens_total", kind="reasoning") == 30
    assert one("amaris_llm_tokens_total", kind="cached") == 2176
    assert one("amaris_llm_wait_seconds_total") > 0
    expected = ((2500 - 2176) * 2.0 + 2176 * 0.5 + 160 * 8.0) / 1e6
    assert one("amaris_llm_cost_dollars_total") == pytest.approx(expected)
    # no agent of the step path was called
    assert {dict(k)["agent"] for k in samples(text, "amaris_llm_model_calls_total")} == {"scorer"}
    # the simulator reads the same numbers back from the page
    read = ledger_from_metrics(text)[("scorer", MODEL)]
    assert (
        read.calls,
        read.failed,
        read.prompt_tokens,
        read.completion_tokens,
        read.reasoning_tokens,
        read.cached_tokens,
    ) == (3, 1, 2500, 160, 30, 2176)
    lines = [
        json.loads(line) for line in (settings.log_dir / "llm_calls.jsonl").read_text().splitlines()
    ]
    assert [(r["outcome"], r.get("prompt_tokens"), r.get("cached_tokens")) for r in lines] == [
        ("ok", 1200, 1024),
        ("ok", 1300, 1152),
        ("ok", None, None),
        ("transient_error", None, None),
    ]


def test_a_response_without_usage_counts_a_call_and_no_tokens() -> None:
    for usage in (
        "",
        ', "usage": null',
        ', "usage": {"prompt_tokens": null, '
        '"completion_tokens": true, "prompt_tokens_details": null}',
    ):
        raw = f'{{"choices": [{{"message": {{"content": "{{}}"}}}}]{usage}}}'.encode()
        completion = parse_completion(raw)
        assert (
            completion.prompt_tokens,
            completion.completion_tokens,
            completion.cached_tokens,
        ) == (None, None, None)
        ledger = TokenLedger()
        ledger.record("scorer", MODEL, usage_of(completion, 0.5), step=3)
        assert (
            ledger.totals()
            == ledger.for_step(3)
            == {("scorer", MODEL): Usage(calls=1, seconds=0.5)}
        )
    ledger.record("analyzer", MODEL, usage_of(None, 2.0), step=4)
    assert ledger.for_step(3) == {("scorer", MODEL): Usage(calls=1, seconds=0.5)}
    assert ledger.for_step(4) == {("analyzer", MODEL): Usage(failed=1, seconds=2.0)}
    assert ledger.totals()[("analyzer", MODEL)] == Usage(failed=1, seconds=2.0)
    cached = parse_completion(
        b'{"choices": [], "usage": {"prompt_tokens": 2048, '
        b'"prompt_tokens_details": {"cached_tokens": 1920}}}'
    )
    assert (cached.prompt_tokens, cached.cached_tokens) == (2048, 1920)


def test_cost_from_a_price_table() -> None:
    usage = Usage(
        calls=2,
        prompt_tokens=3_000_000,
        cached_tokens=1_000_000,
        completion_tokens=500_000,
        reasoning_tokens=200_000,
    )
    # 2M uncached at $2, 1M cached at $0.5, 0.5M completion (reasoning included) at $8
    assert dollars(usage, RATE) == pytest.approx(4.0 + 0.5 + 4.0)
    assert dollars(usage, ModelPrice(prompt=2.0, completion=8.0)) == pytest.approx(6.0 + 4.0)
    table = {("scorer", MODEL): usage, ("analyzer", "other"): Usage(calls=1, prompt_tokens=10)}
    assert cost(table, {}) is None  # no price table: no cost shown
    assert cost(table, {MODEL: RATE}) is None  # a model with tokens and no price
    assert cost(
        {("scorer", MODEL): usage, ("updater", "free"): Usage(calls=1)}, {MODEL: RATE}
    ) == pytest.approx(8.5)  # a model without tokens needs no price


async def _usage_artifact(since: datetime) -> str:
    """The markdown of the ``usage-step-1`` artifact of the step-1 run started after
    ``since`` (other tests of this worker run a step 1 on the same Prefect server)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
        FlowRunFilter,
        FlowRunFilterName,
        FlowRunFilterStartTime,
    )

    async with get_client() as prefect:
        runs = await prefect.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=["step-1"]),
                start_time=FlowRunFilterStartTime(after_=since),
            )
        )
        assert len(runs) == 1
        artifacts = await prefect.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[runs[0].id]),
                key=ArtifactFilterKey(any_=["usage-step-1"]),
            )
        )
    assert len(artifacts) == 1
    return str(artifacts[0].data)


@pytest.mark.usefixtures("prefect_harness")
def test_a_steps_artifact_shows_its_tokens_and_cost(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = judged(10_000, 1_000, reasoning=200, cached=4_000)
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{"agents.default.model": MODEL, "pricing": PRICING, "pipeline.rollouts_per_step": None},
    )
    since = datetime.now(UTC)
    with serve(settings) as client:
        score_step(client, 1, ["correct"] * 4 + ["hacking"] * 4)
        assert client.post("/complete", json={"step": 1}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
        assert done["status"] == "updated", done
    markdown = asyncio.run(_usage_artifact(since))
    step_one = len(fake_llm.requests)
    pipeline = step_one - 8
    assert pipeline >= 5  # analyzer, summarizer, query generator, updater... on this step
    assert f"| scorer | {MODEL} | 8 | 0 | 0 | 80000 | 32000 | 8000 | 1600 |" in markdown
    assert (
        f"| all |  | {step_one} | 0 | 0 | {step_one * 10_000} | {step_one * 4_000} | "
        f"{step_one * 1_000} | {step_one * 200} |"
    ) in markdown
    for agent in ("analyzer", "summarizer", "updater"):
        assert f"| {agent} | {MODEL} | " in markdown
    dollars = step_one * (6_000 * 2.0 + 4_000 * 0.5 + 1_000 * 8.0) / 1e6
    assert (
        f"**Cost:** ${dollars:.4f} for 8 rollouts (${dollars / 8 * 1000:.4f} per 1,000 rollouts)."
    ) in markdown


def test_the_sim_report_shows_tokens_and_cost_per_step(tmp_path: Path) -> None:
    def step(number: int, prompt: int) -> StepResult:
        rollouts = [RolloutResult(f"r{number}-{i}", "correct", 1.0, "scored", 1) for i in range(4)]
        usage = {
            ("scorer", MODEL): Usage(
                calls=4, prompt_tokens=prompt, cached_tokens=100, completion_tokens=50, seconds=2.0
            ),
            ("updater", MODEL): Usage(
                calls=1,
                failed=1,
                prompt_tokens=1000,
                completion_tokens=200,
                reasoning_tokens=20,
                seconds=3.0,
            ),
        }
        return StepResult(number, 1, rollouts, unchanged(number), usage)

    run = RunResult(
        "simulate",
        [step(0, 400), step(1, 600)],
        [{"version": 1, "origin": "config", "adaptive": []}],
        [],
        1.0,
        "offline",
        {},
    )
    write_report(tmp_path / "priced", [run], "t", pricing={MODEL: RATE})
    write_report(tmp_path / "unpriced", [run], "t")
    metrics = json.loads((tmp_path / "priced" / "metrics.json").read_text())["runs"]["simulate"]
    first = metrics["steps"][0]["usage"]
    assert (
        first["calls"],
        first["failed"],
        first["prompt_tokens"],
        first["cached_tokens"],
        first["completion_tokens"],
        first["reasoning_tokens"],
    ) == (5, 1, 1400, 100, 250, 20)
    step_cost = ((1400 - 100) * 2.0 + 100 * 0.5 + 250 * 8.0) / 1e6
    assert first["cost"] == pytest.approx(step_cost)
    assert first["cost_per_1000_rollouts"] == pytest.approx(step_cost / 4 * 1000)
    assert metrics["usage"]["prompt_tokens"] == 3000
    assert [(a["agent"], a["calls"]) for a in metrics["usage_by_agent"]] == [
        ("scorer", 8),
        ("updater", 2),
    ]
    page = (tmp_path / "priced" / "report.md").read_text()
    assert (
        f"| 0 | 5 | 1 | 1400 | 100 | 250 | 20 | 5.0 | ${step_cost:.4f} | "
        f"${step_cost / 4 * 1000:.4f} |"
    ) in page
    unpriced = json.loads((tmp_path / "unpriced" / "metrics.json").read_text())
    assert unpriced["runs"]["simulate"]["usage"]["cost"] is None
    assert (
        "| 0 | 5 | 1 | 1400 | 100 | 250 | 20 | 5.0 | - | - |"
        in (tmp_path / "unpriced" / "report.md").read_text()
    )


def test_a_bad_price_is_refused_naming_its_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("pricing:\n  judge-7b: {prompt: -1, completion: 2}\n")
    with pytest.raises(ConfigError, match=r"pricing\.judge-7b\.prompt"):
        load_settings(path)
    path.write_text("pricing:\n  judge-7b: {prompt: 1}\n")
    with pytest.raises(ConfigError, match=r"pricing\.judge-7b\.completion"):
        load_settings(path)


def test_the_step_artifact_prices_each_agent_at_its_own_price() -> None:
    scorer_price = TokenPrice(input_per_mtok=3.0, output_per_mtok=15.0)
    scorer = usage_of(parse_completion(USAGE_BODY), 1.0, price=scorer_price)
    analyzer = usage_of(parse_completion(USAGE_BODY), 2.0)  # no price of its own
    priced = usage_markdown(1, 10, {("scorer", MODEL): scorer}, {})
    dollars = (1000 * 3.0 + 100 * 15.0) / 1e6
    assert f"| scorer | {MODEL} | 1 | 0 | 0 | 1000 | 0 | 100 | 0 | 1.0 | {dollars:.4f} |" in priced
    assert f"**Cost:** ${dollars:.4f} for 10 rollouts" in priced
    both = {("scorer", MODEL): scorer, ("analyzer", MODEL): analyzer}
    unknown = usage_markdown(1, 10, both, {})
    assert f"| analyzer | {MODEL} | 1 | 0 | 0 | 1000 | 0 | 100 | 0 | 2.0 | - |" in unknown
    assert f"**Cost:** unknown: no price for `analyzer ({MODEL})`" in unknown
    # the model's price covers the agents without one
    covered = usage_markdown(1, 10, both, {MODEL: RATE})
    assert f"**Cost:** ${dollars + (1000 * 2.0 + 100 * 8.0) / 1e6:.4f} for 10 rollouts" in covered
    assert "Cost" not in usage_markdown(1, 10, {("analyzer", MODEL): analyzer}, {})
