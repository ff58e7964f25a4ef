"""Context budgets: a long rollout is cut to fit the judge's window (configured, or read
from ``/v1/models``), and the step pipeline's summarizers split their inputs by budget."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from amaris.app.running import free_port
from amaris.llm.budget import CHARS_PER_TOKEN, ContextWindows, prompt_budget
from amaris.llm.providers import OpenAIProvider
from amaris.sim.judge_server import Reply
from tests.support.agents import HACKED, agent_of, calls_by_agent
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_helpers import metadata, rollout, score_step
from tests.support.settings import llm_settings
from tests.support.testclient import TestClient

WINDOW = 2000
MAX_TOKENS = 200


def server_window(window: int, chars_per_token: float = 4.0) -> Callable[[dict[str, Any]], Reply]:
    """A server that refuses, as vLLM does, a prompt over its context window (counting a
    token per ``chars_per_token`` characters) and otherwise judges offline."""

    def reply(body: dict[str, Any]) -> Reply:
        tokens = int(sum(len(m["content"]) for m in body["messages"]) / chars_per_token)
        requested = tokens + (body.get("max_tokens") or 0)
        if requested > window:
            return Reply(
                status=400,
                content=f"This model's maximum context length is {window} tokens. However, "
                f"you requested {requested} tokens ({tokens} in the messages, "
                f"{body.get('max_tokens')} in the completion).",
            )
        return offline_reply(body)

    return reply


def long_body(index: int) -> dict[str, Any]:
    output = (
        f"HEAD-MARK {index} "
        + "I check every digit of the product again. " * 1000
        + "The answer is 42. TAIL-MARK"
    )
    return {
        "rollout": {
            "id": f"long-{index}",
            "input": "What is 6 * 7?",
            "output": output,
            "supplemental_context": "Answer: 42",
        },
        "metadata": {"current_step": 0},
    }


def sent_rollout(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


@pytest.fixture
def windowed(fake_llm: FakeLLM) -> Iterator[FakeLLM]:
    fake_llm.default = server_window(WINDOW)
    yield fake_llm
    fake_llm.default = offline_reply


def test_a_rollout_over_the_configured_window_is_cut_and_scored(
    tmp_path: Path, windowed: FakeLLM
) -> None:
    settings = llm_settings(
        tmp_path,
        windowed,
        **{"agents.scorer.context_window": WINDOW, "agents.scorer.max_tokens": MAX_TOKENS},
    )
    with serve(settings) as client:
        answer = client.post("/score", json=long_body(0)).json()
        short = client.post(
            "/score",
            json={**long_body(1), "rollout": {**long_body(1)["rollout"], "output": "6 * 7 = 42"}},
        ).json()
        metrics = client.get("/metrics").text
        counters = client.get("/healthz").json()["counters"]
    assert answer["status"] == "scored", answer
    assert answer["truncated"] == ["rollout.output"]
    assert short["status"] == "scored" and short["truncated"] == []
    sent = sent_rollout(windowed.requests[0])
    # head and tail kept, around the marker; the prompt fits with room for the answer
    assert "HEAD-MARK" in sent and "TAIL-MARK" in sent and "truncated by amaris" in sent
    chars = sum(len(m["content"]) for m in windowed.requests[0]["messages"])
    assert chars / CHARS_PER_TOKEN <= prompt_budget(WINDOW, MAX_TOKENS)
    assert 'amaris_rollouts_truncated_total{cause="context_window"} 1.0' in metrics
    assert counters["truncated.context_window"] == 1
    assert windowed.model_requests == 0  # configured: /v1/models is not asked


def test_a_denser_tokenizer_than_estimated_is_learnt_from_the_overflow(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # 2.5 characters per token: the estimate (3.5) undercounts the prompt by 40%.
    fake_llm.default = server_window(WINDOW, chars_per_token=2.5)
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{"agents.scorer.context_window": WINDOW, "agents.scorer.max_tokens": MAX_TOKENS},
    )
    try:
        with serve(settings) as client:
            first = client.post("/score", json=long_body(0)).json()
            calls_for_first = len(fake_llm.requests)
            second = client.post("/score", json=long_body(1)).json()
    finally:
        fake_llm.default = offline_reply
    assert first["status"] == second["status"] == "scored", (first, second)
    assert first["truncated"] == second["truncated"] == ["rollout.output"]
    assert calls_for_first == 2  # refused once, cut again to the corrected budget
    assert len(fake_llm.requests) == 3  # the second was cut right the first time


def test_the_window_is_read_once_from_v1_models_max_model_len(
    tmp_path: Path, windowed: FakeLLM
) -> None:
    windowed.models = [
        {"id": "small-judge", "object": "model", "owned_by": "vllm", "max_model_len": WINDOW}
    ]
    settings = llm_settings(
        tmp_path,
        windowed,
        **{"agents.default.model": "small-judge", "agents.default.max_tokens": MAX_TOKENS},
    )
    with serve(settings) as client:
        answers = client.post(
            "/batch_score", json={"items": [long_body(i) for i in range(3)]}
        ).json()["results"]
    assert [a["status"] for a in answers] == ["scored"] * 3, answers
    assert all(a["truncated"] == ["rollout.output"] for a in answers)
    assert windowed.model_requests == 1


def test_an_unlisted_model_has_an_unknown_window_logged_once(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    settings = llm_settings(tmp_path, fake_llm)  # gpt-4o-mini: the fake lists offline-rules
    caplog.set_level(logging.WARNING, logger="amaris.llm")
    with serve(settings) as client:
        answers = [client.post("/score", json=long_body(i)).json() for i in range(3)]
    assert [(a["status"], a["truncated"]) for a in answers] == [("scored", [])] * 3
    assert fake_llm.model_requests == 1
    unknown = [r for r in caplog.records if "max_model_len" in r.getMessage()]
    assert len(unknown) == 1 and "gpt-4o-mini" in unknown[0].getMessage()


async def test_an_unreachable_models_listing_means_unknown_read_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = OpenAIProvider("key", f"http://127.0.0.1:{free_port()}/v1")  # nothing there
    windows = ContextWindows()
    caplog.set_level(logging.WARNING, logger="amaris.llm")
    try:
        for _ in range(3):
            assert (
                await windows.read(provider.description, "m", lambda: provider.models(5.0)) is None
            )
    finally:
        await provider.close()
    assert windows.cached(provider.description, "m") == (True, None)
    failures = [r for r in caplog.records if "cannot list models" in r.getMessage()]
    assert len(failures) == 1 and "APIConnectionError" in failures[0].getMessage()


def run_step(client: TestClient, step: int) -> dict[str, Any]:
    score_step(client, step, HACKED)
    assert client.post("/complete", json={"step": step}).json() == {"status": "complete"}
    done: dict[str, Any] = client.get(
        "/rubric_status/wait", params={"step": step, "timeout": 120}
    ).json()
    return done


@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("use_chunking", [False, True])
def test_a_small_summarizer_window_makes_more_smaller_calls(
    tmp_path: Path, fake_llm: FakeLLM, use_chunking: bool
) -> None:
    def step_with(folder: str, **overrides: Any) -> tuple[dict[str, Any], dict[str, int]]:
        fake_llm.requests.clear()
        settings = llm_settings(
            tmp_path / folder, fake_llm, **{"pipeline.use_chunking": use_chunking, **overrides}
        )
        with serve(settings) as client:
            done = run_step(client, 1)
        return done, calls_by_agent(fake_llm)

    done, unbounded = step_with("unbounded")
    assert done["status"] == "updated", done
    assert unbounded["summarizer"] == 1 and "meta_summarizer" not in unbounded
    whole = max(
        sum(len(m["content"]) for m in b["messages"])
        for b in fake_llm.requests
        if agent_of(b) == "summarizer"
    )
    # A prompt budget of three quarters of that single call: the six analyses go in parts.
    window = int(whole / CHARS_PER_TOKEN * 3 / 4) + 1024
    done, bounded = step_with("bounded", **{"agents.summarizer.context_window": window})
    assert done["status"] == "updated", done
    assert bounded["summarizer"] > 1
    assert bounded["meta_summarizer"] == 1
    sizes = [
        sum(len(m["content"]) for m in b["messages"])
        for b in fake_llm.requests
        if agent_of(b) == "summarizer"
    ]
    assert max(sizes) / CHARS_PER_TOKEN <= prompt_budget(window, None)


@pytest.mark.usefixtures("prefect_harness")
def test_small_windows_of_the_analyzer_and_meta_summarizer(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "pipeline.chunk_size": 1,
            "agents.analyzer.context_window": 1024 + 3000,
            "agents.meta_summarizer.context_window": 1024 + 2400,
        },
    )
    with serve(settings) as client:
        items = [
            {"rollout": rollout(1, i, b), "metadata": metadata(1)} for i, b in enumerate(HACKED)
        ]
        items[0]["rollout"]["output"] = long_body(0)["rollout"]["output"]
        assert client.post("/batch_score", json={"items": items}).status_code == 200
        assert client.post("/complete", json={"step": 1}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()
    assert done["status"] == "updated", done
    analyzer = [b for b in fake_llm.requests if agent_of(b) == "analyzer"]
    assert len(analyzer) == len(HACKED)
    for body in analyzer:
        chars = sum(len(m["content"]) for m in body["messages"])
        assert chars / CHARS_PER_TOKEN <= 3000
    assert any(
        "HEAD-MARK" in sent_rollout(b) and "truncated by amaris" in sent_rollout(b)
        for b in analyzer
    )
    # six chunk summaries do not fit one meta-summarizer call: consolidated in rounds
    counts = calls_by_agent(fake_llm)
    assert counts["summarizer"] == len(HACKED)
    assert counts["meta_summarizer"] > 1
    for body in fake_llm.requests:
        if agent_of(body) == "meta_summarizer":
            chars = sum(len(m["content"]) for m in body["messages"])
            assert chars / CHARS_PER_TOKEN <= 2400
