"""HTTP tests of /healthz, /rubrics, auth, request ids, OpenAPI and error bodies."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import amaris
from amaris.settings import AGENTS, secret_value
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.settings import llm_settings, make_settings
from tests.support.testclient import TestClient

RUBRIC: dict[str, Any] = {
    "anchor_rubrics": [
        {"text": "The response gives the correct final answer.", "weight": 1.0},
        {"text": "The response is concise.", "weight": 0.25},
    ],
    "adaptive_rubrics": [
        {"text": "The response explains its reasoning steps.", "weight": 0.5},
        {"text": "The response offers several candidate answers at once.", "weight": -0.5},
    ],
}

SCORE_BODY: dict[str, Any] = {
    "rollout": {"id": "r1", "input": "What is 2+2?", "output": "4", "supplemental_context": "4"}
}

PROTECTED: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/score", SCORE_BODY),
    ("POST", "/batch_score", {"items": [SCORE_BODY]}),
    ("GET", "/rubrics", None),
    ("GET", "/rubrics/history", None),
    ("GET", "/precheck/rules", None),
]


# -- /healthz -----------------------------------------------------------------------------------


def test_healthz_shows_the_offline_judge_unmistakably(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        r = client.get("/healthz")
    assert r.status_code == 200
    health = r.json()
    assert health["status"] == "ok"
    assert health["version"] == amaris.__version__
    assert health["offline_judge"] is True
    assert "offline" in health["judge_backend"]
    assert "NOT an LLM" in health["judge_backend"]
    assert health["judge_model"] == "offline-rules"
    assert health["offline_agents"] == list(AGENTS)
    assert health["rubric_version"] == 1
    assert health["counters"] == {}


def test_healthz_shows_the_llm_endpoint(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = llm_settings(tmp_path, fake_llm, **{"agents.scorer.model": "judge-large"})
    with serve(settings) as client:
        health = client.get("/healthz").json()
    assert health["offline_judge"] is False
    assert health["judge_backend"] == fake_llm.url
    assert health["judge_model"] == "judge-large"
    assert health["version"] == amaris.__version__
    assert fake_llm.requests == []  # health does not call the judge


def test_agents_served_offline_beside_an_llm_are_named_at_start_and_in_healthz(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    settings = llm_settings(
        tmp_path, fake_llm, **{"client.analyzer.offline": True, "client.updater.offline": True}
    )
    with caplog.at_level(logging.WARNING, logger="amaris"), serve(settings) as client:
        health = client.get("/healthz").json()
    assert health["offline_judge"] is False
    assert health["offline_agents"] == ["analyzer", "updater"]
    assert (
        "agents served by the OFFLINE rule-based agents, not an LLM: analyzer, updater"
        in caplog.messages
    )


def test_healthz_counts_scored_and_cached(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        client.post("/score", json=SCORE_BODY)
        client.post("/score", json=SCORE_BODY)
        assert client.get("/healthz").json()["counters"] == {"scored": 1, "cached": 1}


# -- /rubrics -----------------------------------------------------------------------------------


def test_rubrics_shows_anchors_and_adaptive_criteria(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path, **RUBRIC)) as client:
        r = client.get("/rubrics")
    assert r.status_code == 200
    rubric = r.json()
    assert rubric["version"] == 1
    assert rubric["parent"] is None
    assert rubric["step"] is None
    assert rubric["origin"] == "config"
    assert rubric["created_at"]
    assert rubric["anchors"] == [
        {
            "id": "A1",
            "text": "The response gives the correct final answer.",
            "weight": 1.0,
            "is_anchor": True,
            "rule": None,
            "findings": [],
        },
        {
            "id": "A2",
            "text": "The response is concise.",
            "weight": 0.25,
            "is_anchor": True,
            "rule": None,
            "findings": [],
        },
    ]
    assert rubric["adaptive"] == [
        {
            "id": "R1",
            "text": "The response explains its reasoning steps.",
            "weight": 0.5,
            "is_anchor": False,
            "rule": None,
            "findings": [],
        },
        {
            "id": "R2",
            "text": "The response offers several candidate answers at once.",
            "weight": -0.5,
            "is_anchor": False,
            "rule": None,
            "findings": [],
        },
    ]


def test_default_rubric_has_one_anchor_and_no_adaptive_criteria(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        rubric = client.get("/rubrics").json()
    assert [(c["id"], c["weight"]) for c in rubric["anchors"]] == [("A1", 1.0)]
    assert rubric["adaptive"] == []


def test_rubric_history_lists_every_version(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path, **RUBRIC)) as client:
        current = client.get("/rubrics").json()
        r = client.get("/rubrics/history")
    assert r.status_code == 200
    assert r.json() == [current]


def test_scores_name_the_rubric_version_in_force(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path, **RUBRIC)) as client:
        version = client.get("/rubrics").json()["version"]
        scored = client.post("/score", json=SCORE_BODY).json()
    assert scored["rubric_version"] == version == 1


# -- auth ---------------------------------------------------------------------------------------


def _call(
    client: TestClient, method: str, path: str, body: dict[str, Any] | None, **headers: str
) -> Any:
    return client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", "Bearer s3cret2", "Bearer ", "s3cret", "Basic s3cret", "Token s3cret"],
)
def test_protected_endpoints_refuse_a_missing_or_wrong_key(
    tmp_path: Path, fake_llm: FakeLLM, authorization: str | None
) -> None:
    settings = llm_settings(tmp_path, fake_llm, **{"server.api_key": "s3cret"})
    headers = {"Authorization": authorization} if authorization is not None else {}
    with serve(settings) as client:
        for method, path, body in PROTECTED:
            r = _call(client, method, path, body, **headers)
            assert r.status_code == 401, path
            assert r.headers["WWW-Authenticate"] == "Bearer"
            assert r.json()["error"] == "unauthorized"
            assert [d["field"] for d in r.json()["detail"]] == ["Authorization"]
        assert client.get("/healthz").json()["counters"] == {}
    assert fake_llm.requests == []


@pytest.mark.parametrize("authorization", ["Bearer s3cret", "bearer s3cret", "Bearer  s3cret "])
def test_protected_endpoints_accept_the_right_key(tmp_path: Path, authorization: str) -> None:
    settings = make_settings(tmp_path, **{"server.api_key": "s3cret"})
    with serve(settings) as client:
        for method, path, body in PROTECTED:
            r = _call(client, method, path, body, Authorization=authorization)
            assert r.status_code == 200, path
        assert client.get("/healthz").json()["counters"] == {"scored": 1, "cached": 1}


def test_healthz_needs_no_key(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path, **{"server.api_key": "s3cret"})) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/healthz", headers={"Authorization": "Bearer wrong"}).status_code == 200


def test_auth_is_checked_before_the_body(tmp_path: Path) -> None:
    # An unauthenticated caller learns nothing about the body schema.
    with serve(make_settings(tmp_path, **{"server.api_key": "s3cret"})) as client:
        r = client.post("/score", json={"nonsense": True})
    assert r.status_code == 401


def test_amaris_api_key_env_protects_the_endpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMARIS_API_KEY", "from-env")
    settings = make_settings(tmp_path)
    assert secret_value(settings.server.api_key) == "from-env"
    with serve(settings) as client:
        assert client.get("/healthz").status_code == 200
        for method, path, body in PROTECTED:
            assert _call(client, method, path, body).status_code == 401
            wrong = _call(client, method, path, body, Authorization="Bearer s3cret")
            assert wrong.status_code == 401
            right = _call(client, method, path, body, Authorization="Bearer from-env")
            assert right.status_code == 200


def test_no_key_configured_means_open_endpoints(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        for method, path, body in PROTECTED:
            assert _call(client, method, path, body).status_code == 200
            assert _call(client, method, path, body, Authorization="Bearer x").status_code == 200


# -- X-Request-ID -------------------------------------------------------------------------------


def test_request_id_is_echoed(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path, **{"server.max_body_bytes": 500})) as client:
        for r in (
            client.get("/healthz", headers={"X-Request-ID": "trainer-42"}),
            client.post("/score", json=SCORE_BODY, headers={"X-Request-ID": "trainer-42"}),
            client.post("/score", json={}, headers={"X-Request-ID": "trainer-42"}),  # 422
            client.post(
                "/score", content=b"x" * 600, headers={"X-Request-ID": "trainer-42"}
            ),  # 413
            client.get("/nowhere", headers={"X-Request-ID": "trainer-42"}),  # 404
        ):
            assert r.headers["X-Request-ID"] == "trainer-42", r.status_code


def test_request_id_is_generated_when_absent(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        first = client.get("/healthz").headers["X-Request-ID"]
        second = client.post("/score", json=SCORE_BODY).headers["X-Request-ID"]
    assert len(first) == 16 and int(first, 16) >= 0
    assert len(second) == 16
    assert first != second


def test_request_id_reaches_the_judge_call_log(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = llm_settings(tmp_path, fake_llm)
    with serve(settings) as client:
        client.post("/score", json=SCORE_BODY, headers={"X-Request-ID": "trace-me"})
    # The lifespan has ended: the call log is flushed.
    log = (settings.log_dir / "llm_calls.jsonl").read_text(encoding="utf-8")
    records = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert [r["request_id"] for r in records if r.get("agent") == "scorer"] == ["trace-me"]


# -- OpenAPI ------------------------------------------------------------------------------------


def _schema_ref(operation: dict[str, Any], status: str) -> str:
    ref: str = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
    return ref.rsplit("/", 1)[-1]


def test_openapi_documents_every_endpoint(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        r = client.get("/openapi.json")
    assert r.status_code == 200
    spec = r.json()
    assert spec["info"]["title"] == "amaris"
    assert spec["info"]["version"] == amaris.__version__
    paths = spec["paths"]
    assert {"/score", "/batch_score", "/healthz", "/rubrics", "/rubrics/history"} <= set(paths)

    score = paths["/score"]["post"]
    body_ref = score["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body_ref.endswith("/ScoreRequest")
    assert _schema_ref(score, "200") == "ScoreResponse"
    assert _schema_ref(score, "503") == "ScoreResponse"
    for status in ("401", "413", "422"):
        assert _schema_ref(score, status) == "ErrorResponse"

    batch = paths["/batch_score"]["post"]
    body_ref = batch["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body_ref.endswith("/BatchScoreRequest")
    assert _schema_ref(batch, "200") == "BatchScoreResponse"
    for status in ("401", "413", "422"):
        assert _schema_ref(batch, status) == "ErrorResponse"

    assert _schema_ref(paths["/healthz"]["get"], "200") == "HealthResponse"
    assert "401" not in paths["/healthz"]["get"]["responses"]
    assert _schema_ref(paths["/rubrics"]["get"], "200") == "RubricPublic"
    assert _schema_ref(paths["/rubrics"]["get"], "401") == "ErrorResponse"
    history = paths["/rubrics/history"]["get"]["responses"]["200"]["content"]
    assert history["application/json"]["schema"]["items"]["$ref"].endswith("/RubricPublic")
    assert _schema_ref(paths["/rubrics/history"]["get"], "401") == "ErrorResponse"

    schemas = spec["components"]["schemas"]
    assert "HTTPValidationError" not in schemas  # 422 is documented as ErrorResponse
    assert set(schemas["ScoreRequest"]["properties"]) == {
        "rollout",
        "metadata",
        "include_breakdown",
        "include_turns",
    }
    assert schemas["ScoreRequest"]["required"] == ["rollout"]
    # A rollout is text (input and output) or an agent's trajectory (messages).
    assert schemas["Rollout"]["required"] == ["id"]
    assert schemas["Rollout"]["oneOf"] == [
        {"required": ["input", "output"]},
        {"required": ["messages"]},
    ]
    assert {"high_level_goal", "model_size", "current_step", "total_steps", "other_context"} <= set(
        schemas["TrainingMetadata"]["properties"]
    )
    assert set(schemas["ScoreResponse"]["properties"]) >= {"score", "rubric_version", "status"}
    assert schemas["ErrorResponse"]["properties"]["detail"]["items"]["$ref"].endswith(
        "/ErrorDetail"
    )
    assert set(schemas["ErrorDetail"]["required"]) == {"field", "message"}


# -- other errors -------------------------------------------------------------------------------


def test_unknown_path_is_404_with_an_error_body(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        r = client.get("/nowhere")
    assert r.status_code == 404
    assert r.json() == {"error": "not_found", "detail": [{"field": "path", "message": "Not Found"}]}


def test_wrong_method_is_405_with_an_error_body(tmp_path: Path) -> None:
    with serve(make_settings(tmp_path)) as client:
        r = client.get("/score")
    assert r.status_code == 405
    assert r.headers["Allow"] == "POST"
    assert r.json()["error"] == "method_not_allowed"


def test_unexpected_failure_is_500_with_an_error_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(make_settings(tmp_path), raise_server_exceptions=False) as client:
        scorer = client.app.state.services.scorer  # type: ignore[attr-defined]

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(scorer, "judge", broken)
        r = client.post("/score", json=SCORE_BODY)
    assert r.status_code == 500
    assert r.json() == {
        "error": "internal_error",
        "detail": [{"field": "server", "message": "internal server error"}],
    }
    assert "disk on fire" not in r.text
