"""bench/performance/rate_limit.py at its smoke size: amaris and a judge that enforces its
limits, run for real; the section's figures those of its scenarios."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench._common import markers
from bench.performance import rate_limit as bench


def test_the_throughput_figures_are_read_from_the_metrics_page() -> None:
    page = "\n".join(
        [
            "# TYPE amaris_llm_model_calls counter",
            'amaris_llm_model_calls_total{agent="scorer",model="m"} 12.0',
            'amaris_llm_model_calls_total{agent="analyzer",model="m"} 5.0',
            "# TYPE amaris_llm_tokens counter",
            'amaris_llm_tokens_total{agent="scorer",model="m",kind="prompt"} 900.0',
            'amaris_llm_tokens_total{agent="scorer",model="m",kind="completion"} 100.0',
            'amaris_llm_tokens_total{agent="scorer",model="m",kind="cached"} 700.0',
            "# TYPE amaris_llm_rate_limit_wait_seconds counter",
            'amaris_llm_rate_limit_wait_seconds_total{agent="scorer",kind="requests"} 2.5',
            'amaris_llm_rate_limit_wait_seconds_total{agent="scorer",kind="tokens"} 0.5',
        ]
    )
    assert bench.scorer_totals(page) == (12, 1000, 3.0)
    figures = bench.Figures(
        bench.SCENARIOS[0], 30.0, calls=297, tokens=0, refused=0, waited=1.0, failed=0
    )
    assert figures.per_minute == pytest.approx(594) and figures.passed
    assert not bench.Figures(bench.SCENARIOS[0], 30.0, 297, 0, 1, 1.0, 0).passed


@pytest.mark.slow  # amaris serve and the offline LLM, twice
@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_writes_each_scenarios_throughput(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    start, end = markers("rate_limit")
    section = text[text.index(start) : text.index(end)]
    rows = re.findall(
        r"^\| (requests|tokens) \| ([\d,]+) \| ([\d,]+) \| ([\d.]+)% \| (\d+) \| (\d+) \|",
        section,
        re.M,
    )
    assert [r[0] for r in rows] == ["requests", "tokens"]
    for kind, limit, measured, share, calls, refused in rows:
        assert int(calls) > 0
        ratio = int(measured.replace(",", "")) / int(limit.replace(",", ""))
        assert float(share) == pytest.approx(ratio * 100, abs=0.1)
        verdict = "PASS" if abs(float(share) / 100 - 1) <= 0.05 and refused == "0" else "FAIL"
        assert f"**{verdict}** {kind} a minute within 5% of the limit, no 429" in section
