"""RewardClient's step answer against a real uvicorn server: ``rubric_updated`` returns the
server's own answer model, every key the route sent and no other, for a step this version
recorded and for one an older version did; code that reads the answer by key, as the
JSON it is, works and is warned."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from qdrant_client import QdrantClient

from amaris.app.wiring import build_services, create_app
from amaris.client import RewardClient, WaitAnswer
from amaris.step_answer import CanarySummary, OlderScopeOutcome, ScopeOutcome
from amaris.steps.outcomes import scopes_json
from tests.support.fake_llm import serve_in_thread
from tests.support.settings import make_settings
from tests.support.step_runs import full_outcome

pytestmark = pytest.mark.usefixtures("prefect_harness")

DONE, OLDER = 5, 6
OLDER_SCOPE = {"outcome": "published", "version": 2, "hacking": [{"tag": "Hedging", "n": 1}]}
"""A scope's outcome as an older version recorded it: no base_version, rollouts or
dropped, a behaviour as the summarizer wrote it."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose step registry holds a done step of each kind, read at start-up."""
    settings = make_settings(tmp_path_factory.mktemp("answers"))
    shared = QdrantClient(location=":memory:")
    services = build_services(settings, qdrant=shared)
    services.steps.set(DONE, status="done", scopes=scopes_json({"global": full_outcome()}))
    services.steps.set(OLDER, status="done", scopes={"global": OLDER_SCOPE})
    with serve_in_thread(create_app(settings, services=services)) as url:
        yield url
    shared.close()


def _json(url: str, path: str, **params: Any) -> Any:
    answer = httpx.get(f"{url}{path}", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


async def _wait_async(url: str, step: int) -> WaitAnswer:
    async with RewardClient(url, timeout=30) as client:
        return await client.rubric_updated_async(step, timeout=30)


def test_the_client_returns_the_answer_the_server_sent(server: str) -> None:
    sent = _json(server, "/rubric_status/wait", step=DONE)
    answer = RewardClient(server, timeout=30).rubric_updated(DONE, timeout=30)
    assert isinstance(answer, WaitAnswer)
    assert answer == asyncio.run(_wait_async(server, DONE))
    assert answer.model_dump(mode="json") == sent
    assert answer.scopes is not None
    scope = answer.scopes["global"]
    assert isinstance(scope, ScopeOutcome)
    # Every field of the outcome the flow made, the canary without its probes.
    made = full_outcome()
    assert made.canary is not None
    assert scope == made.model_copy(
        update={"canary": CanarySummary(**made.canary.model_dump(exclude={"probes"}))}
    )
    assert list(sent["scopes"]["global"]) == list(ScopeOutcome.model_fields)
    # GET /steps/{step} answers the same scopes.
    assert _json(server, f"/steps/{DONE}")["scopes"] == sent["scopes"]


def test_a_step_an_older_version_recorded_is_returned_with_what_it_recorded(
    server: str,
) -> None:
    sent = _json(server, "/rubric_status/wait", step=OLDER)
    answer = RewardClient(server, timeout=30).rubric_updated(OLDER, timeout=30)
    assert answer.model_dump(mode="json") == sent
    assert answer.status == "updated"
    assert answer.scopes is not None
    scope = answer.scopes["global"]
    assert isinstance(scope, OlderScopeOutcome)
    assert (scope.outcome, scope.reason) == ("published", None)
    assert scope.model_extra == {"version": 2, "hacking": [{"tag": "Hedging", "n": 1}]}


def test_reading_the_answer_by_key_works_and_is_deprecated(server: str) -> None:
    answer = RewardClient(server, timeout=30).rubric_updated(DONE, timeout=30)
    with pytest.warns(DeprecationWarning, match=r"read its attribute \(status\)"):
        assert answer["status"] == "rejected"
    with pytest.warns(DeprecationWarning):
        scope = answer["scopes"]["global"]
        assert scope["outcome"] == "rejected"
        assert scope["canary"]["judge_calls"] == 3
        assert scope["hacking"][0]["rollout_ids"] == ["r1", "r2"]
        assert scope.get("nothing", "default") == "default"
        assert "probes" not in scope["canary"]
    with pytest.raises(KeyError), pytest.warns(DeprecationWarning):
        scope["nothing"]
    older = RewardClient(server, timeout=30).rubric_updated(OLDER, timeout=30)
    with pytest.warns(DeprecationWarning):
        assert older["scopes"]["global"]["version"] == 2
        assert "strategy" not in older["scopes"]["global"]
