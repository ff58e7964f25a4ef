"""Back-pressure and the per-request timeout: explicit answers, never a made-up reward."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx

from amaris.sim.judge_server import Reply, create_llm_app
from amaris.sim.wire import ChatRequest
from tests.support.app import in_memory_app
from tests.support.fake_llm import FakeLLM, offline_reply, serve_in_thread
from tests.support.settings import llm_settings


def body(i: int) -> dict[str, Any]:
    output = f"The answer is 4. Variant {chr(97 + i)}."
    return {
        "rollout": {"id": f"r{i}", "input": "2+2?", "output": output, "supplemental_context": "4"},
        "metadata": {"current_step": 0},
    }


HOLD_S = 30.0
"""Bound of a held judge call (never reached: the test releases them)."""


def test_queued_judge_work_is_bounded_with_429(tmp_path: Path) -> None:
    # The judge holds each call until the test has seen the excess refused: the three calls
    # are in flight when the refused requests come, however loaded the machine.
    arrived, release = threading.Semaphore(0), threading.Event()

    async def judge(request: ChatRequest) -> Reply:
        if not release.is_set():
            arrived.release()
            await asyncio.to_thread(release.wait, HOLD_S)
        return offline_reply(dict(request))

    with serve_in_thread(create_llm_app(judge)) as llm:
        settings = llm_settings(
            tmp_path,
            FakeLLM(url=f"{llm}/v1"),
            **{"scoring.max_pending": 3, "scoring.retry_after_seconds": 2},
        )
        with serve_in_thread(in_memory_app(settings)) as url:
            results: list[httpx.Response] = []
            threads = [
                threading.Thread(
                    target=lambda i=i: results.append(
                        httpx.post(f"{url}/score", json=body(i), timeout=60)
                    )
                )
                for i in range(3)
            ]
            for thread in threads:
                thread.start()
            try:
                for _ in range(3):
                    assert arrived.acquire(timeout=HOLD_S), "a call never reached the judge"
                refused = httpx.post(f"{url}/score", json=body(9), timeout=30)
                assert refused.status_code == 429
                assert refused.headers["retry-after"] == "2"
                assert refused.json()["detail"][0]["field"] == "scoring.max_pending"
                batch = httpx.post(f"{url}/batch_score", json={"items": [body(7)]}, timeout=30)
                assert batch.status_code == 429
            finally:
                release.set()
            for thread in threads:
                thread.join()
            assert sorted(r.status_code for r in results) == [200, 200, 200]
            # once the queue drains, requests are accepted again
            assert httpx.post(f"{url}/score", json=body(9), timeout=30).json()["score"] == 1.0
            metrics = httpx.get(f"{url}/healthz").json()["counters"]
            assert metrics["overloaded"] == 1  # the batch was refused before the scorer saw it


def test_per_request_timeout_gives_unscored(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.default = lambda b: Reply(content=offline_reply(b).content, delay_s=1.0)
    settings = llm_settings(
        tmp_path, fake_llm, **{"scoring.timeout_seconds": 0.3, "agents.default.timeout": 5.0}
    )
    try:
        with serve_in_thread(in_memory_app(settings)) as url:
            answer = httpx.post(f"{url}/score", json=body(1), timeout=30).json()
            assert answer["status"] == "unscored"
            assert answer["score"] is None
            assert answer["reason"].startswith("judge_timeout")
            counters = httpx.get(f"{url}/healthz").json()["counters"]
            assert counters["unscored.judge_timeout"] == 1
    finally:
        fake_llm.default = offline_reply
