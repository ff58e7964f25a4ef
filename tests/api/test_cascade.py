"""The calibrated cascade (``scoring.cascade``) through the real app (Qdrant in memory): the
cheap scorer judges first, every rollout is escalated to the scorer until the calibration
has its pairs, then only those whose cheap verdict is under the threshold; every answer says
which judge decided, and the calibration survives a restart. Two scripted endpoints at the
gateway seam (tests/support/scripted_llm.py): the cheap judge, sure and right on ``sure-*``
replies, unsure and wrong on ``doubt-*`` ones, and the strong judge."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from amaris.llm.gateway import build_providers
from amaris.llm.providers import Completion, TokenLogprob
from amaris.scoring import cascade
from amaris.scoring.calibration import AUDIT_FOLDER, CALIBRATION_FILE
from amaris.settings import load_settings
from tests.support.app import in_memory_app
from tests.support.scripted_llm import Call, ScriptedProvider, status, verdicts
from tests.support.settings import make_settings
from tests.support.testclient import TestClient

RUBRIC: dict[str, Any] = {
    "anchor_rubrics": [{"text": "The response gives the correct final answer.", "weight": 1.0}],
}
CASCADE: dict[str, Any] = {
    "client.cheap_scorer.offline": True,  # its provider is scripted below; this turns it on
    "agents.cheap_scorer.logprobs": True,
    "agents.cheap_scorer.model": "cheap-model",
    "scoring.cascade.min_pairs": 4,
    # Two sure pairs that agree hold a lower bound of 2/3: enough for this test's target.
    "scoring.cascade.target_agreement": 0.6,
    "scoring.cascade.probe_share": 0.0,
}
SURE = 0.999
"""The cheap judge's probability of its verdict on a ``sure-*`` reply (margin 0.998)."""
DOUBT = 0.6
"""Its probability on a ``doubt-*`` reply (margin 0.2), where it is wrong."""


def cheap_judge(call: Call) -> Completion:
    """Verdict 4 on A1, with its score token's logprobs."""
    p = SURE if call.rollout()["output"].startswith("sure") else DOUBT
    tokens = [
        TokenLogprob('{"verdicts": [{"id": "A1", "reason": "ok", "score": ', 0.0),
        TokenLogprob("4", math.log(p), (("4", math.log(p)), ("0", math.log(1 - p)))),
        TokenLogprob("}]}", 0.0),
    ]
    content = "".join(t.token for t in tokens)
    return Completion(content, prompt_tokens=10, completion_tokens=10, logprobs=tuple(tokens))


def strong_judge(call: Call) -> Completion:
    return verdicts(("A1", 4 if call.rollout()["output"].startswith("sure") else 0))


@contextmanager
def serve(
    tmp_path: Path, strong: Any = strong_judge, **overrides: Any
) -> Iterator[tuple[TestClient, ScriptedProvider, ScriptedProvider]]:
    settings = make_settings(tmp_path, **{**RUBRIC, **CASCADE, **overrides})
    cheap, judge = ScriptedProvider(default=cheap_judge), ScriptedProvider(default=strong)
    providers = {**build_providers(settings), "scorer": judge, "cheap_scorer": cheap}
    with TestClient(in_memory_app(settings, providers=providers)) as client:
        yield client, cheap, judge


def score(client: TestClient, output: str, step: int = 0) -> dict[str, Any]:
    body = {
        "rollout": {"id": f"r-{output}", "input": "What is 2+2?", "output": output},
        "metadata": {"current_step": step},
    }
    response = client.post("/score", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_escalates_everything_until_calibrated_then_only_doubtful_verdicts(
    tmp_path: Path,
) -> None:
    with serve(tmp_path) as (client, cheap, strong):
        # Warm-up: under min_pairs every rollout goes to the scorer too, and is its answer.
        warm = [score(client, name) for name in ("sure-1", "doubt-1", "sure-2", "doubt-2")]
        assert [a["judge"] for a in warm] == ["strong"] * 4
        assert [a["score"] for a in warm] == [1.0, 0.0, 1.0, 0.0]
        assert (len(cheap.calls), len(strong.calls)) == (4, 4)
        # Calibrated on those pairs: sure verdicts agree, doubtful ones do not.
        sure = score(client, "sure-3")
        assert (sure["judge"], len(strong.calls)) == ("cheap", 4)
        assert sure["score"] == pytest.approx(SURE)  # the cheap judge's expected score
        doubt = score(client, "doubt-3")
        assert (doubt["judge"], doubt["score"], len(strong.calls)) == ("strong", 0.0, 5)
        assert len(cheap.calls) == 6
        counters = client.get("/healthz").json()["counters"]
        metrics = client.get("/metrics").text
    assert counters["scored"] == 6
    assert counters["cascade.cheap"] == 1 and counters["cascade.strong"] == 5
    assert counters["cascade.escalated"] == 5 and counters["logprobs_used"] == 6
    # The same counters in /metrics, with the calibration in force.
    for outcome, count in (("cheap", 1), ("strong", 5), ("escalated", 5), ("probed", 0)):
        assert f'amaris_cascade_total{{outcome="{outcome}"}} {count}.0' in metrics
    assert "amaris_cascade_pairs 5.0" in metrics
    assert "amaris_cascade_threshold " in metrics
    # Each agent's own model and ledger account.
    assert {c.agent for c in cheap.calls} == {"cheap_scorer"}
    assert {c.agent for c in strong.calls} == {"scorer"}


def test_the_calibration_survives_a_restart(tmp_path: Path) -> None:
    with serve(tmp_path) as (client, _, strong):
        for name in ("sure-1", "doubt-1", "sure-2", "doubt-2"):
            score(client, name)
        assert len(strong.calls) == 4
    assert (tmp_path / "data" / CALIBRATION_FILE).exists()
    with serve(tmp_path) as (client, cheap, strong):
        assert score(client, "sure-9", step=1)["judge"] == "cheap"
        assert (len(cheap.calls), len(strong.calls)) == (1, 0)


def test_an_unscored_answer_names_no_judge_and_a_plain_scorer_is_strong(
    tmp_path: Path,
) -> None:
    with serve(tmp_path / "a", strong=status(401, "bad key")) as (client, _, _):
        answer = score(client, "doubt-1")
    assert (answer["status"], answer["judge"]) == ("unscored", None)
    settings = make_settings(tmp_path / "b", **RUBRIC)
    providers = {**build_providers(settings), "scorer": ScriptedProvider(default=strong_judge)}
    with TestClient(in_memory_app(settings, providers=providers)) as client:
        assert score(client, "sure-1")["judge"] == "strong"
        # the pre-check's floor: no judge decided
        assert score(client, "")["judge"] is None
        # no cascade, no cascade series
        assert "amaris_cascade" not in client.get("/metrics").text


def test_audit_pairs_join_the_cheap_verdicts_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cascade, "AUDIT_SCAN_SECONDS", 0.0)  # look at every judgement
    # Calibrated from a first run; the second pairs the audit of a step's cheap decisions.
    with serve(tmp_path) as (client, _, _):
        for name in ("sure-1", "doubt-1", "sure-2", "doubt-2"):
            score(client, name)
    with serve(tmp_path) as (client, _, strong):
        assert score(client, "sure-5", step=2)["judge"] == "cheap"
        # The audit found that the cheap verdict on sure-5 was wrong.
        folder = tmp_path / "data" / AUDIT_FOLDER
        folder.mkdir()
        drop = '{"step": 2, "population": 10, "rewards": {"r-sure-5": 0.0, "r-x": 1.0}}'
        (folder / "step-2.json").write_text(drop)
        score(client, "doubt-5", step=2)
        counters = client.get("/healthz").json()["counters"]
        assert counters["cascade.audit_pairs"] == 1
        assert not (folder / "step-2.json").exists()
        assert len(strong.calls) == 1


def test_samples_and_logprobs_are_accepted_for_the_cheap_scorer_only() -> None:
    settings = load_settings(None, **{"agents.cheap_scorer.samples": 3})
    assert settings.cascade_on and settings.agent_options("cheap_scorer").samples == 3
    assert not load_settings(None).cascade_on
