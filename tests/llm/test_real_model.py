"""The real-model tier: amaris against SmolLM2-135M-Instruct behind ``tests/support/real_llm.py``.

A 135M model's verdicts are noise: these tests assert parsing, types, flow and accounting,
never verdict quality. Every test here shares the session's one server (one model load).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from amaris.app.wiring import create_app
from amaris.sim.judge_server import Reply
from amaris.trust.judge_canaries import budget_of
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM, offline_reply
from tests.support.pipeline_canary import agent_of
from tests.support.real_llm import MODEL_ID, RealLLM, sample_rollouts
from tests.support.scripted_llm import Call
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

# One xdist worker runs every test of this file (--dist loadfile in pyproject.toml): the
# session loads the model once. Keep the tier's tests in this file.
pytestmark = [pytest.mark.real_model, pytest.mark.slow]

ROLLOUTS = 20
MAX_TOKENS = 192
"""Completion cap of every agent: the verdicts take far fewer; a reply that rambles is
cut here (judge_truncated) instead of running for minutes on CPU."""

GRADE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "grade": {"type": "integer", "enum": [0, 1, 2, 3, 4]},
        "label": {"type": "string", "enum": ["right", "wrong"]},
    },
    "required": ["grade", "label"],
    "additionalProperties": False,
}
MESSAGES = [
    {"role": "system", "content": "Grade the answer from 0 to 4. Reply in JSON."},
    {"role": "user", "content": "Question: 6 * 7? Answer: 42"},
]


def _chat(server: RealLLM, mode: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.base_url(mode)}/chat/completions",
        json={"model": MODEL_ID, "messages": MESSAGES, **body},
        timeout=300,
    )


def test_server_decodes_to_the_json_schema_and_reports_usage(real_llm: RealLLM) -> None:
    before = real_llm.stats()["normal"]
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "grade", "strict": True, "schema": GRADE_SCHEMA},
    }
    answer = _chat(real_llm, "normal", response_format=response_format, max_tokens=40)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    parsed = json.loads(choice["message"]["content"])
    assert list(parsed) == ["grade", "label"]
    assert parsed["grade"] in range(5) and parsed["label"] in ("right", "wrong")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 10 and usage["completion_tokens"] > 3

    cut = _chat(real_llm, "normal", response_format=response_format, max_tokens=3).json()
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["usage"]["completion_tokens"] == 3

    after = real_llm.stats()["normal"]
    assert after["requests"] == before["requests"] + 2
    assert after["completion_tokens"] == (
        before["completion_tokens"] + usage["completion_tokens"] + 3
    )


def test_server_modes_reason_first_or_refuse_json_schema(real_llm: RealLLM) -> None:
    schema_format = {
        "type": "json_schema",
        "json_schema": {"name": "grade", "strict": True, "schema": GRADE_SCHEMA},
    }
    think = _chat(real_llm, "think", response_format=schema_format, max_tokens=80).json()
    content = think["choices"][0]["message"]["content"]
    assert content.startswith("<think>\n") and "\n</think>\n\n" in content
    assert json.loads(content.split("</think>", 1)[1])["grade"] in range(5)
    assert think["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0

    field = _chat(real_llm, "reasoning-field", response_format=schema_format, max_tokens=80)
    message = field.json()["choices"][0]["message"]
    assert message["reasoning_content"] and "<think>" not in message["content"]
    assert json.loads(message["content"])["label"] in ("right", "wrong")

    cut = _chat(real_llm, "think", response_format=schema_format, max_tokens=8).json()
    assert cut["choices"][0]["finish_reason"] == "length"
    assert "</think>" not in cut["choices"][0]["message"]["content"]

    refused = _chat(real_llm, "no-json-schema", response_format=schema_format, max_tokens=40)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "response_format"
    json_object = _chat(
        real_llm, "no-json-schema", response_format={"type": "json_object"}, max_tokens=40
    )
    assert json_object.status_code == 200


# -- amaris against the real model -------------------------------------------------------------


def real_settings(tmp_path: Path, server: RealLLM, mode: str = "normal", **overrides: Any) -> Any:
    """The default configuration pointed at the real model (``mode``'s endpoint), with a
    bounded completion (CPU time), and as many requests in flight as a test's rollouts:
    the server decodes the requests that arrive together in one batch
    (``tests/support/real_llm_batch.py``, as vLLM batches them), where amaris's default on
    this machine (4) would make batches of 4. The timeouts are sized for a batch of 20 on
    a loaded CPU: each request waits for the batch's longest reply."""
    return make_settings(
        tmp_path,
        **{
            "client.default.base_url": server.base_url(mode),
            "client.default.api_key": "EMPTY",
            "client.default.max_concurrency": ROLLOUTS,
            "agents.default.model": MODEL_ID,
            "agents.default.max_tokens": MAX_TOKENS,
            "agents.default.timeout": 1200.0,
            "scoring.timeout_seconds": 1200.0,
            **overrides,
        },
    )


def score_all(
    client: TestClient, rollouts: list[dict[str, Any]], together: bool = False
) -> list[dict[str, Any]]:
    """``/score`` each rollout, in turn or (``together``) all at once, as a trainer's
    workers do: the server then decodes their judge requests in one batch."""

    def score(rollout: dict[str, Any]) -> dict[str, Any]:
        response = client.post("/score", json={"rollout": rollout, "include_breakdown": True})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    if not together:
        return [score(rollout) for rollout in rollouts]
    with ThreadPoolExecutor(len(rollouts)) as pool:
        return list(pool.map(score, rollouts))


def assert_well_formed(results: list[dict[str, Any]], rubric_ids: list[str]) -> None:
    """Scored results carry a reward in [0, 1] and one integer verdict per criterion."""
    for result in results:
        if result["status"] == "scored":
            assert 0.0 <= result["score"] <= 1.0
            assert [c["id"] for c in result["breakdown"]] == rubric_ids
            assert all(c["verdict"] in range(5) for c in result["breakdown"])
        else:
            assert result["score"] is None and result["reason"]


def scored_share(results: list[dict[str, Any]]) -> float:
    return sum(r["status"] == "scored" for r in results) / len(results)


def assert_one_request_per_scored_rollout(
    served: list[str], rollouts: list[dict[str, str]], results: list[dict[str, Any]]
) -> None:
    """The server got exactly one request for each scored rollout, and none that was not a
    rollout's: a cache or a dedup bug collapsing distinct rollouts into one judge call
    (each reusing its verdict) fails here. ``served``: the last message of each request
    the server answered (its ``/requests``); a rollout is known by its prompt, as the
    scorer's data block writes it (the inputs of :func:`sample_rollouts` are distinct)."""
    keys = [f'"input": {json.dumps(r["input"], ensure_ascii=False)},' for r in rollouts]
    assert len(set(keys)) == len(keys)
    asked = [sum(key in text for text in served) for key in keys]
    assert [n for n, r in zip(asked, results, strict=True) if r["status"] == "scored"] == [
        1 for r in results if r["status"] == "scored"
    ], asked
    assert all(sum(key in text for key in keys) == 1 for text in served), served


def test_score_with_the_default_config_scores_95_percent(tmp_path: Path, real_llm: RealLLM) -> None:
    rollouts = sample_rollouts(ROLLOUTS, seed=1)
    since = len(real_llm.requests("normal"))
    with TestClient(
        create_app(real_settings(tmp_path, real_llm), qdrant_location=":memory:")
    ) as client:
        results = score_all(client, rollouts, together=True)
        health = client.get("/healthz").json()
    assert_well_formed(results, ["A1"])
    assert scored_share(results) >= 0.95, [r["reason"] for r in results]
    assert_one_request_per_scored_rollout(real_llm.requests("normal")[since:], rollouts, results)
    assert health["structured_output"]["scorer"]["mode"] == "json_schema"
    assert health["counters"]["scored"] == sum(r["status"] == "scored" for r in results)


def test_score_with_a_reasoning_model_scores_95_percent(tmp_path: Path, real_llm: RealLLM) -> None:
    rollouts = sample_rollouts(ROLLOUTS, seed=2)
    before = real_llm.stats()["think"]
    since = len(real_llm.requests("think"))
    with TestClient(
        create_app(real_settings(tmp_path, real_llm, "think"), qdrant_location=":memory:")
    ) as client:
        results = score_all(client, rollouts, together=True)
        metrics = client.get("/metrics").text
    assert_well_formed(results, ["A1"])
    assert scored_share(results) >= 0.95, [r["reason"] for r in results]
    assert_one_request_per_scored_rollout(real_llm.requests("think")[since:], rollouts, results)
    reasoning = real_llm.stats()["think"]["reasoning_tokens"] - before["reasoning_tokens"]
    assert reasoning > 0
    assert metric(metrics, "amaris_llm_tokens_total", agent="scorer", kind="reasoning") == reasoning


def test_a_server_refusing_json_schema_gets_the_fallback_and_no_5xx(
    tmp_path: Path, real_llm: RealLLM
) -> None:
    # The json_object fallback scores as json_schema does: amaris shows the judge one
    # filled example of the verdicts (the rubric's ids) at the end of the system message,
    # and reads a lone verdict or a verdict on an id of the model's own tolerantly
    # (amaris/llm/reply_format.py, docs/configuration.md "Structured outputs").
    rollouts = sample_rollouts(ROLLOUTS, seed=3)
    before = real_llm.stats()["no-json-schema"]
    since = len(real_llm.requests("no-json-schema"))
    with TestClient(
        create_app(real_settings(tmp_path, real_llm, "no-json-schema"), qdrant_location=":memory:")
    ) as client:
        # The first alone: the server refuses its json_schema, and amaris remembers it
        # before the others are sent (concurrent requests would each see the refusal).
        results = score_all(client, rollouts[:1])
        results += score_all(client, rollouts[1:], together=True)
        health = client.get("/healthz").json()
    after = real_llm.stats()["no-json-schema"]
    assert_well_formed(results, ["A1"])
    assert after["rejected"] - before["rejected"] == 1  # refused once, then remembered
    assert scored_share(results) >= 0.95, [r["reason"] for r in results]
    served = real_llm.requests("no-json-schema")[since:]
    # A corrective re-ask's last message is the re-ask, not the rollout: one per rollout
    # left judge_invalid, none for a scored one; the first asks, one per rollout.
    reasks = [text for text in served if text.startswith("Your reply was invalid")]
    invalid = [r for r in results if (r["reason"] or "").startswith("judge_invalid")]
    assert len(reasks) == len(invalid), [r["reason"] for r in results]
    asks = [text for text in served if not text.startswith("Your reply was invalid")]
    assert_one_request_per_scored_rollout(asks, rollouts, results)
    for agent in ("scorer", "analyzer", "updater"):
        mode = health["structured_output"][agent]
        assert mode["mode"] == "json_object"
        assert "json_schema refused with 400" in mode["reason"]
        assert "response_format" in mode["reason"]
    assert health["counters"]["scored"] == sum(r["status"] == "scored" for r in results)


def test_token_counters_match_the_servers_usage(tmp_path: Path, real_llm: RealLLM) -> None:
    before = real_llm.stats()["reasoning-field"]
    with TestClient(
        create_app(real_settings(tmp_path, real_llm, "reasoning-field"), qdrant_location=":memory:")
    ) as client:
        results = score_all(client, sample_rollouts(3, seed=4))
        metrics = client.get("/metrics").text
    after = real_llm.stats()["reasoning-field"]
    assert_well_formed(results, ["A1"])
    # the ledger's counters, per agent and model, are the server's own usage (the server
    # counts with the model's tokenizer)
    ledger = {"agent": "scorer", "model": MODEL_ID}
    for kind in ("prompt", "completion", "reasoning"):
        served = after[f"{kind}_tokens"] - before[f"{kind}_tokens"]
        assert served > 0
        assert metric(metrics, "amaris_llm_tokens_total", **ledger, kind=kind) == served
    assert metric(metrics, "amaris_llm_tokens_total", **ledger, kind="cached") == 0
    calls = after["requests"] - before["requests"]
    assert metric(metrics, "amaris_llm_calls_total", path="score") == calls
    assert metric(metrics, "amaris_llm_model_calls_total", **ledger) == calls
    assert metric(metrics, "amaris_llm_wait_seconds_total", **ledger) > 0


def test_cut_replies_and_context_overflow_are_typed_unscored_results(
    tmp_path: Path, real_llm: RealLLM
) -> None:
    # A window larger than the server's (8192, in its /v1/models): amaris sends the long
    # rollout whole, and the server refuses it.
    settings = real_settings(
        tmp_path,
        real_llm,
        "think",
        **{"agents.scorer.max_tokens": 8, "agents.scorer.context_window": 1_000_000},
    )
    long_rollout = {**sample_rollouts(1, seed=5)[0], "output": "The answer is 7. " * 3000}
    with TestClient(create_app(settings, qdrant_location=":memory:")) as client:
        cut, overflow = score_all(client, [sample_rollouts(1, seed=6)[0], long_rollout])
        counters = client.get("/healthz").json()["counters"]
    assert cut["status"] == "unscored" and cut["score"] is None
    assert cut["reason"].startswith("judge_truncated: ")
    assert overflow["status"] == "unscored" and overflow["score"] is None
    assert overflow["reason"].startswith("judge_context_overflow: ")
    assert counters["unscored.judge_truncated"] == counters["unscored.judge_context_overflow"] == 1


def test_a_rollout_over_the_context_window_is_cut_to_fit_and_judged(
    tmp_path: Path, real_llm: RealLLM
) -> None:
    # A window below the server's 8192 bounds the CPU's prefill; the server counts the
    # prompt with the model's own tokenizer, denser on this text (digits, punctuation) than
    # amaris's estimate: the first cut is refused, and the second, to the budget corrected
    # from the server's count, is judged.
    settings = real_settings(tmp_path, real_llm, **{"agents.scorer.context_window": 2048})
    long_rollout = {**sample_rollouts(1, seed=5)[0], "output": "The answer is 7. " * 3000}
    with TestClient(create_app(settings, qdrant_location=":memory:")) as client:
        [fitted] = score_all(client, [long_rollout])
        counters = client.get("/healthz").json()["counters"]
    assert fitted["truncated"] == ["rollout.output"]
    assert fitted["status"] == "scored", fitted
    assert counters["truncated.context_window"] == 1


TOOL_TRAJECTORY: dict[str, Any] = {
    "id": "agent-1",
    "messages": [
        {"role": "system", "content": "You fix bugs. Run the tests before you answer."},
        {"role": "user", "content": "Make add(2, 2) return 4 in calc.py."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "run_tests", "arguments": '{"path": "tests/"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "1 failed: add(2, 2) == 5"},
        {"role": "assistant", "content": "I changed `a + b + 1` to `a + b`. Tests pass."},
    ],
    "outcome": {"tests_passed": True},
    "finish_reason": "stop",
}


def test_a_tool_calling_trajectory_is_judged_as_one(tmp_path: Path, real_llm: RealLLM) -> None:
    since = len(real_llm.requests("normal"))
    with TestClient(
        create_app(real_settings(tmp_path, real_llm), qdrant_location=":memory:")
    ) as client:
        [result] = score_all(client, [TOOL_TRAJECTORY])
    assert_well_formed([result], ["A1"])
    assert result["status"] == "scored", result
    assert set(result["rewards"]) == {"A1", "anchors", "adaptive"}
    [asked] = real_llm.requests("normal")[since:]
    # The judge read the turns, the tool call and its result, and the outcome.
    for line in ("call call_1: run_tests", "tool result for call_1", "tests_passed"):
        assert line in asked, asked


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples with ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != name:
                continue
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


PIPELINE_ROLLOUTS = 2
PIPELINE_MAX_TOKENS = {
    "analyzer": 512,
    "summarizer": 512,
    "meta_summarizer": 512,
    "query_generator": 256,
    "updater": 512,
}
"""Completion cap of each pipeline agent, a bound on the tier's CPU time. The gateway fits
each request's schema to its agent's cap (``amaris/llm/output_fit.py``: every string and
list bound lowered until the longest reply the schema allows fits), so the constrained
decoder closes every reply before the cap however much the 135M model writes: no reply
is cut (``finish_reason: length``), no piece of the step is dropped. The analysis and
summary schemas need about 450 tokens at their floors (16 characters a string, one item
a list); these caps are a little above."""
PIPELINE_AGENTS = tuple(PIPELINE_MAX_TOKENS)


@pytest.mark.usefixtures("prefect_harness")
def test_one_step_pipeline_runs_to_its_end_on_the_real_model(
    tmp_path: Path, real_llm: RealLLM
) -> None:
    # Two rollouts in chunks of one: an analysis and a summary per chunk, then the
    # meta-summary, the memory queries and the update; every agent on the real model.
    before_stats = real_llm.stats()["normal"]
    before = before_stats["requests"]
    settings = real_settings(
        tmp_path,
        real_llm,
        **{
            "pipeline.chunk_size": 1,
            **{f"agents.{agent}.max_tokens": cap for agent, cap in PIPELINE_MAX_TOKENS.items()},
            # One request at a time, each decoded alone (the outcome asserted below is
            # greedy decoding's of each request alone): the
            # others wait in amaris, where their timeout has not started (a loaded CI
            # machine decodes slowly).
            "client.default.max_concurrency": 1,
            "agents.default.timeout": 1200.0,
            # A stronger repeat penalty than Ollama's default: greedy decoding of a 135M
            # model otherwise repeats one item of a summary's lists to their bound.
            "agents.default.extra_body": {"repetition_penalty": 1.2},
            "agents.scorer.extra_body": {"repetition_penalty": 1.1},
            "server.max_wait_seconds": 3600,
        },
    )
    app = create_app(settings, qdrant_location=":memory:")
    with TestClient(app) as client:
        score_all(client, sample_rollouts(PIPELINE_ROLLOUTS, seed=7))
        assert client.post("/complete", json={}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"timeout": 3600}).json()
        services = app.state.services
        stats = services.pipeline_gateway.stats + services.gateway.stats
    after_stats = real_llm.stats()["normal"]
    served = after_stats["requests"] - before
    passes = after_stats["forward_passes"] - before_stats["forward_passes"]
    calls = {agent: stats[f"{agent}.calls"] for agent in ("scorer", *PIPELINE_AGENTS)}
    log_lines = (settings.log_dir / "llm_calls.jsonl").read_text().splitlines()
    replies = [
        {k: r.get(k) for k in ("agent", "completion_tokens", "finish_reason", "latency_ms")}
        for r in map(json.loads, log_lines)
    ]
    print(
        "real-model step:",
        json.dumps({"calls": calls, "forward_passes": passes, "outcome": done}, indent=1),
    )
    print("replies:", *map(json.dumps, replies), sep="\n")
    assert done["status"] in ("updated", "rejected"), done
    outcome = done["scopes"]["global"]
    # Every agent was asked and answered: no reply cut by its cap, no piece of the step
    # dropped, every agent called (a re-ask of an invalid reply is one more call).
    assert [r for r in replies if r["finish_reason"] != "stop"] == [], replies
    assert all(stats[f"{agent}.truncated"] == 0 for agent in calls), stats
    assert outcome["dropped"] == [], outcome
    # The scorer judged each rollout once, and the judge canary probed it: two judged
    # rollouts are under one probe at judge_canaries.max_share, so step 0 gets one
    # (budget_of: one probe on every ceil(1 / (max_share * judged))-th step).
    # The rubric canary's probes go to the scorer agent too.
    probes = budget_of(PIPELINE_ROLLOUTS, settings.judge_canaries.max_share, 0)
    checked = outcome.get("canary", {}).get("judge_calls", 0)
    assert calls["scorer"] == PIPELINE_ROLLOUTS + probes + checked, (calls, probes, checked)
    assert calls["analyzer"] >= PIPELINE_ROLLOUTS and calls["summarizer"] >= PIPELINE_ROLLOUTS
    assert all(calls[agent] >= 1 for agent in PIPELINE_AGENTS), calls
    # The outcomes accepted: the updater's valid proposal through the guardrails, then
    # ``published`` (a new rubric version) or refused by the rubric canary, whose probes
    # this model judges as noise (a wrong answer's words may move a verdict by half the
    # scale). Decoding is greedy and the server's replies deterministic, so the step ends
    # the same way at every run: a guardrail's refusal, an invalid updater reply or an
    # ``unchanged`` is a change in what amaris asks or how it checks the proposal, for its
    # author to look at (the outcome's reason is in the assertion's message).
    assert outcome["strategy"] is not None, outcome
    if outcome["outcome"] == "rejected":
        assert outcome["reason"].startswith("rubric canary: "), outcome
        assert outcome["version"] == outcome["base_version"], outcome
    else:
        assert outcome["outcome"] == "published", outcome
        assert outcome["version"] == outcome["base_version"] + 1, outcome
    assert served == sum(calls.values()) == len(replies)  # every request answered once


AUDIT_ROLLOUTS = 3
AUDIT_SAMPLES = 2
"""``audit.min_samples`` (its floor): of the step's three judged rollouts, two re-graded by
the real model, two generations the tier pays for."""
AUDITOR_MAX_TOKENS = 96
"""The auditor's cap: the gateway fits the verdict schema (one criterion) to it, the
decoder closes the reply before it."""


def lenient(body: dict[str, Any]) -> Reply:
    """The scripted training judge pays every criterion in full; the other agents get the
    offline judge's replies (the fake server, at the gateway seam)."""
    if agent_of(body) != "scorer":
        return offline_reply(body)
    criteria = Call(body["messages"], None).criteria()
    verdicts = [{"id": c["id"], "reason": "lenient", "score": 4} for c in criteria]
    return Reply(content=json.dumps({"verdicts": verdicts}))


@pytest.mark.usefixtures("prefect_harness")
def test_a_step_is_audited_by_the_real_model_beside_a_lenient_scripted_scorer(
    tmp_path: Path, real_llm: RealLLM, fake_llm: FakeLLM
) -> None:
    # Every agent on the fake server (the scorer lenient) but the auditor, on the real
    # model: the audit task of a real step, through Prefect, parses its replies, types the
    # step's audit and counts its calls under the auditor's own agent.
    fake_llm.default = lenient
    before = real_llm.stats()["normal"]
    settings = llm_settings(
        tmp_path,
        fake_llm,
        **{
            "client.auditor.base_url": real_llm.base_url("normal"),
            "client.auditor.api_key": "EMPTY",
            "agents.auditor.model": MODEL_ID,
            "agents.auditor.max_tokens": AUDITOR_MAX_TOKENS,
            "agents.auditor.timeout": 1200.0,
            "agents.auditor.extra_body": {"repetition_penalty": 1.1},
            # One request at a time, each decoded alone.
            "client.auditor.max_concurrency": 1,
            "audit.min_samples": AUDIT_SAMPLES,
            "audit.budget_share": 1.0,  # two of three is past the default budget's
            "server.max_wait_seconds": 3600,
        },
    )
    with serve(settings) as client:
        scored = score_all(client, sample_rollouts(AUDIT_ROLLOUTS, seed=8))
        assert client.post("/complete", json={}).json() == {"status": "complete"}
        done = client.get("/rubric_status/wait", params={"timeout": 3600}).json()
        step = done["step"]
        detail = client.get(f"/steps/{step}").json()
        services = client.app.state.services  # type: ignore[attr-defined]
        ledger = services.pipeline_gateway.ledger.for_step(step)
    after = real_llm.stats()["normal"]
    print(
        "real-model audit:",
        json.dumps({"forward_passes": after["forward_passes"] - before["forward_passes"]}),
    )
    assert {r["score"] for r in scored} == {1.0}  # the lenient scorer
    assert done["status"] not in ("failed", "pending"), done  # the step's run ended
    audit = detail["audit"]
    assert audit["step"] == step and audit["sampled"] == AUDIT_SAMPLES, audit
    assert audit["failed"] == 0, audit
    assert audit["judge_calls"] == AUDIT_SAMPLES
    assert audit["training_mean"] == 1.0 and 0.0 <= audit["audit_mean"] <= 1.0
    assert audit["gap"] == pytest.approx(1.0 - audit["audit_mean"])
    assert set(audit["scopes"]) == {"global"}
    assert audit["scopes"]["global"]["sampled"] == AUDIT_SAMPLES
    assert [c["id"] for c in audit["criteria"]] == ["A1"]
    # The auditor's calls: only on the real model, counted under ``auditor`` with the
    # server's own usage; the fake served every other agent.
    assert all(r["model"] != MODEL_ID for r in fake_llm.requests)
    usage = ledger[("auditor", MODEL_ID)]
    assert usage.calls == after["requests"] - before["requests"] == AUDIT_SAMPLES
    assert usage.failed == 0
    assert usage.prompt_tokens == after["prompt_tokens"] - before["prompt_tokens"]
    assert usage.completion_tokens == after["completion_tokens"] - before["completion_tokens"]
    assert after["finish_reasons"].get("length", 0) == before["finish_reasons"].get("length", 0)
