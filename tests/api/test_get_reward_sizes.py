"""``POST /get_reward``: sizes checked before any work, the prompt found in its query in
linear time."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from amaris.text.prompt_split import MIN_PROMPT_TAIL, response_of
from flows.scope_facts import group_peers as _group_peers
from tests.support.app import serve
from tests.support.fake_llm import FakeLLM
from tests.support.settings import llm_settings

DEADLINE_S = 60.0
"""Watchdog of a search that must not stall (never part of an assertion)."""


def response_within_deadline(query: str, prompt: str) -> str | None:
    """:func:`response_of` in a worker thread, with a watchdog."""
    found: list[str | None] = []
    worker = threading.Thread(target=lambda: found.append(response_of(query, prompt)), daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    assert not worker.is_alive(), "the prompt search did not end"
    return found[0]


@pytest.mark.parametrize(
    "prompt, query, response",
    [
        # 1.5 million characters of one letter: the tail's first characters occur everywhere.
        ("a" * 1_500_000, "a" * MIN_PROMPT_TAIL + "b", "b"),
        ("a" * 1_500_000, "a" * 1_499_999 + "b", "b"),
        ("ab" * 750_000, "ab" * 300_000 + "c", "c"),
        ("ab" * 750_000, "ba" * 300_000 + "c", "ac"),
        ("ab" * 750_000, "aa" * 300_000 + "c", None),
    ],
    ids=["one-letter-short", "one-letter-long", "period-two", "period-two-shifted", "absent"],
)
def test_a_repetitive_prompt_is_found_in_linear_time(
    prompt: str, query: str, response: str | None
) -> None:
    assert response_within_deadline(query, prompt) == response


def reference_response(query: str, prompt: str) -> str | None:
    """The definition, by brute force: the response after the whole prompt, else after the
    longest tail of the prompt (of ``MIN_PROMPT_TAIL``+ characters) the query begins with."""
    if query.startswith(prompt):
        return query[len(prompt) :]
    if prompt and prompt in query:
        return query[query.index(prompt) + len(prompt) :]
    start = len(query) - len(query.lstrip("\ufffd"))
    for tail in range(len(prompt), MIN_PROMPT_TAIL - 1, -1):
        if query.startswith(prompt[len(prompt) - tail :], start):
            return query[start + tail :]
    return None


def test_the_search_agrees_with_its_definition() -> None:
    rng = random.Random(22)
    for trial in range(3000):
        alphabet = "ab" if trial % 2 else "abc"
        prompt = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        cut = rng.randint(0, len(prompt))
        response = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        query = ("\ufffd" if trial % 5 == 0 else "") + prompt[cut:] + response
        assert response_of(query, prompt) == reference_response(query, prompt), (query, prompt)


def body(prompt: str, query: str) -> dict[str, Any]:
    return {"query": [query], "prompts": [prompt], "labels": ["4"]}


def test_oversized_query_is_refused_before_the_search(tmp_path: Path, fake_llm: FakeLLM) -> None:
    # A query that does not hold its prompt: the search would say so; the size check first.
    settings = llm_settings(tmp_path, fake_llm, **{"scoring.max_field_chars": 1000})
    with serve(settings) as client:
        r = client.post("/get_reward", json=body("What is 2+2?", "x" * 2001))
        steps = client.get("/steps").json()
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == [
        {
            "field": "query[0]",
            "message": "has 2001 characters; the limit is 2000 (prompt and response)",
        }
    ]
    assert fake_llm.requests == []
    assert steps == []


def test_oversized_prompt_is_refused_naming_it(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = llm_settings(tmp_path, fake_llm)
    prompt = "a" * 1_500_000
    with serve(settings) as client:
        r = client.post("/get_reward", json=body(prompt, "a" * MIN_PROMPT_TAIL + "b"))
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == [
        {"field": "prompts[0]", "message": "has 1500000 characters; the limit is 100000"}
    ]
    assert fake_llm.requests == []


def test_a_truncated_prompt_within_the_limits_is_scored(tmp_path: Path, fake_llm: FakeLLM) -> None:
    prompt = "Compute 2+2. " * 500 + "What is 2+2?"
    with serve(llm_settings(tmp_path, fake_llm)) as client:
        request = body(prompt, prompt[-40:] + " 4")
        r = client.post("/get_reward", json=request)
    assert r.status_code == 200, r.text
    assert r.json()["statuses"] == ["scored"]


def test_a_long_prompt_without_group_ids_is_scored_and_grouped_by_prompt(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    # OpenRLHF sends no group_ids: the default group comes from the prompt, without a 422 on
    # group_ids[i] when the prompt passes 512 characters.
    first = ("Compute 2+2. " * 200)[:1988] + "What is 2+2?"
    second = ("Compute 3+3. " * 200)[:1988] + "What is 3+3?"
    assert len(first) == len(second) == 2000
    queries = [first + " 4", first + " 5", second + " 6"]
    with serve(llm_settings(tmp_path, fake_llm)) as client:
        r = client.post("/get_reward", json={"query": queries, "prompts": [first, first, second]})
        services = client.app.state.services  # type: ignore[attr-defined]
        records = services.rollouts.load_step(0)
    assert r.status_code == 200, r.text
    assert r.json()["statuses"] == ["scored"] * 3
    # The step pipeline's groups: the two rollouts of the first prompt are peers, the third
    # is alone in its group.
    peers = _group_peers(records)
    by_output = {rec.rollout.output.strip(): rec for rec in records}
    ids = {out: rec.rollout.id for out, rec in by_output.items()}
    assert [p.id for p in peers[by_output["4"].seq]] == [ids["5"]]
    assert [p.id for p in peers[by_output["5"].seq]] == [ids["4"]]
    assert peers[by_output["6"].seq] == []
