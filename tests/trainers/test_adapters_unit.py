"""What the verl, OpenRLHF and TRL adapters share (``amaris.integrations._remote``): the
target, the step, and one ``/get_reward`` exchange with its retries
(``amaris.client.rewards``), checked answer by answer and against a local HTTP server,
through ``RewardClient``. Needs no fixture of tests/conftest.py (mutation testing runs it
with ``--noconftest``: bench/evaluations/mutation.py ``adapters``)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
import traceback
import weakref
from typing import Any

import httpx
import pytest

from amaris.client import (
    STEP_HEADER,
    AuthenticationError,
    InvalidRequestError,
    RewardClient,
    Rewards,
    RewardUnavailableError,
    ServerUnavailableError,
    ServerUnreachableError,
)
from amaris.client.rewards import Exchange
from amaris.integrations._remote import (
    DEFAULT_URL,
    Target,
    env_step,
    get_rewards,
    get_rewards_async,
    optional_float,
)
from tests.support.reward_recorder import Recorder, recording_server

BODY: dict[str, Any] = {
    "query": ["q0", "q1", "q2"],
    "prompts": ["p0", "p1", "p2"],
    "labels": None,
    "model": "m",
}


def answer(
    rewards: list[float | None],
    *,
    step: int | None = 4,
    versions: list[int | None] | None = None,
    detail: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "rewards": rewards,
        "statuses": ["scored" if r is not None else "unscored" for r in rewards],
        "extra_logs": {"amaris_rubric_version": versions or [1] * len(rewards)},
        "detail": detail or [],
    }
    if step is not None:
        data["step"] = step
    return data


def response(code: int, data: Any = None, headers: dict[str, str] | None = None) -> httpx.Response:
    if data is None:
        return httpx.Response(code, text="plain text " * 50, headers=headers)
    return httpx.Response(code, json=data, headers=headers)


# -- Target, env_step, optional_float, Rewards ----------------------------------------


def test_a_target_takes_arguments_then_the_environment_then_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AMARIS_URL", raising=False)
    monkeypatch.delenv("AMARIS_API_KEY", raising=False)
    assert Target.resolve() == Target(DEFAULT_URL, None, 600.0, 60.0) == Target()
    assert DEFAULT_URL == "http://127.0.0.1:8002"
    monkeypatch.setenv("AMARIS_URL", "http://env:1/")
    monkeypatch.setenv("AMARIS_API_KEY", "env-key")
    assert Target.resolve() == Target("http://env:1", "env-key", 600.0, 60.0)
    given = Target.resolve("http://arg:2//", "arg-key", "5", "0")  # type: ignore[arg-type]
    assert given == Target("http://arg:2", "arg-key", 5.0, 0.0)
    assert Target.resolve(timeout=0, retry_seconds=7) == Target("http://env:1", "env-key", 0.0, 7.0)
    monkeypatch.setenv("AMARIS_API_KEY", "")
    assert Target.resolve(api_key="").api_key is None


def test_the_headers_carry_the_key_and_the_step_even_step_zero() -> None:
    script = Recorder([(200, answer([1.0, 1.0, 1.0]), {})] * 4)
    with recording_server(script) as url:
        keyed, bare = RewardClient(url, 30.0, "k"), RewardClient(url, 30.0, "")
        keyed.get_reward(BODY, 0)
        keyed.get_reward(BODY, None)
        asyncio.run(bare.get_reward_async(BODY, 12))
        bare.get_reward(BODY)
        keyed.close()
        bare.close()
    assert script.header("Authorization") == ["Bearer k", "Bearer k", None, None]
    assert script.header(STEP_HEADER) == ["0", None, "12", None]
    assert STEP_HEADER == "X-Amaris-Step"


def test_the_step_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMARIS_STEP", raising=False)
    assert env_step() is None
    for raw, step in (("0", 0), (" 7 ", 7), ("  ", None)):
        monkeypatch.setenv("AMARIS_STEP", raw)
        assert env_step() == step
    for raw in ("-1", "x", "1.5"):
        monkeypatch.setenv("AMARIS_STEP", raw)
        with pytest.raises(ValueError, match=rf"AMARIS_STEP must be an integer >= 0, got '{raw}'"):
            env_step()


def test_optional_float_names_the_setting() -> None:
    assert optional_float("t", None) is None
    assert optional_float("t", "") is None
    assert optional_float("t", "1.5") == 1.5
    assert optional_float("t", 0) == 0.0
    for bad in ("x", [1]):
        with pytest.raises(ValueError, match=r"^t must be a number, got ") as info:
            optional_float("t", bad)
        assert isinstance(info.value.__cause__, TypeError | ValueError)


def test_rewards_values_needs_every_reward() -> None:
    assert Rewards([1, 0.5], ["scored"] * 2, [1, 1]).values() == [1.0, 0.5]
    assert Rewards([0.0], ["scored"], [1]).values() == [0.0]
    with pytest.raises(RuntimeError, match=r"samples \[0, 2\] have no reward"):
        Rewards([None, 0.5, None], ["unscored"] * 3, [None] * 3).values()


# -- one exchange, answer by answer --------------------------------------------------


def test_a_whole_answer_ends_the_exchange() -> None:
    exchange = Exchange(BODY, 0, 60.0)
    request = exchange.request()
    assert request == (
        {"query": ["q0", "q1", "q2"], "prompts": ["p0", "p1", "p2"], "model": "m"},
        0,
    )
    assert exchange.result == Rewards([None] * 3, ["unscored"] * 3, [None] * 3, 0)
    wait = exchange.receive(response(200, answer([0.5, 0, 1], step=0, versions=[3, 0, 2])))
    assert wait == 0.0
    assert exchange.request() is None
    assert exchange.result == Rewards([0.5, 0.0, 1.0], ["scored"] * 3, [3, None, 2], 0)
    assert [type(r) for r in exchange.result.rewards] == [float] * 3


def test_unscored_samples_are_sent_again_under_the_first_answers_step() -> None:
    exchange = Exchange(BODY, None, 60.0)
    assert exchange.request() == (
        {"query": ["q0", "q1", "q2"], "prompts": ["p0", "p1", "p2"], "model": "m"},
        None,
    )
    first = answer(
        [0.25, None, None],
        step=9,
        detail=[
            {"field": "query[1]", "message": "judge down"},
            {"field": "query[3]", "message": "out of range"},
            {"field": "query[x]", "message": "not an index"},
            {"field": "rollout[2]", "message": "not a query"},
        ],
    )
    wait = exchange.receive(response(503, first, {"Retry-After": "2"}))
    assert wait == 2.0
    assert exchange.request() == (
        {"query": ["q1", "q2"], "prompts": ["p1", "p2"], "model": "m"},
        9,
    )
    # Positions in the second answer are those of the samples sent again.
    second = answer([None, 0.75], step=None, detail=[{"field": "query[0]", "message": "again"}])
    assert exchange.receive(response(503, second, {"Retry-After": "3"})) == 3.0
    assert exchange.request() == (
        {"query": ["q1"], "prompts": ["p1"], "model": "m"},
        9,
    )
    assert exchange.result.rewards == [0.25, None, 0.75]
    assert exchange.result.step == 9
    exchange.receive(response(200, answer([1.0], step=9)))
    assert exchange.request() is None
    assert exchange.result.values() == [0.25, 1.0, 0.75]


def test_a_detail_at_the_end_of_the_sent_samples_is_ignored() -> None:
    exchange = Exchange({"query": ["a", "b"]}, 1, 0.0)
    data = answer(
        [None, 1.0],
        detail=[
            {"field": "query[2]", "message": "past the end"},
            {"field": "query[9]", "message": "far past the end"},
        ],
    )
    with pytest.raises(RewardUnavailableError) as info:
        exchange.receive(response(503, data))
    assert info.value.reasons == {0: "HTTP 503"}


def test_the_budget_spent_raises_with_what_was_scored_and_why_not() -> None:
    exchange = Exchange(BODY, 2, 0.0)
    data = answer([0.5, None, None], detail=[{"field": "query[2]", "message": "judge timeout"}])
    with pytest.raises(RewardUnavailableError) as info:
        exchange.receive(response(503, data))
    assert info.value.reasons == {1: "HTTP 503", 2: "judge timeout"}
    assert info.value.result.rewards == [0.5, None, None]
    assert str(info.value) == "2 of 3 samples unscored (sample 1: HTTP 503)"
    empty = RewardUnavailableError(Rewards([], [], []), {})
    assert str(empty) == "0 of 0 samples unscored (sample 0: no answer)"


@pytest.mark.parametrize("code", [429, 502, 503, 504])
def test_overload_and_gateway_errors_are_retried(code: int) -> None:
    exchange = Exchange(BODY, None, 60.0)
    assert exchange.receive(response(code)) == 1.0  # no Retry-After: 1 s
    assert exchange.receive(response(code, {}, {"Retry-After": "0"})) == 0.05  # at least
    long = exchange.receive(response(code, {}, {"Retry-After": "1000"}))
    assert 0.05 < long <= 60  # never past the budget
    assert exchange.result.rewards == [None] * 3  # a 503 without rewards records nothing
    spent = Exchange(BODY, None, 0.0)
    with pytest.raises(RewardUnavailableError) as info:
        spent.receive(response(code))
    assert info.value.reasons == dict.fromkeys(range(3), f"HTTP {code}")


def test_a_401_needs_the_key() -> None:
    with pytest.raises(AuthenticationError, match="AMARIS_API_KEY"):
        Exchange(BODY, None, 60.0).receive(response(401, {"detail": []}))


@pytest.mark.parametrize("code", [400, 404, 422, 499])
def test_a_client_error_names_the_fields(code: int) -> None:
    detail = [
        {"field": "query[0]", "message": "empty"},
        "noise",
        {"field": "labels", "message": "x"},
    ]
    with pytest.raises(InvalidRequestError) as info:
        Exchange(BODY, None, 60.0).receive(response(code, {"detail": detail}))
    assert info.value.status_code == code
    assert info.value.fields == ["query[0]", "labels"]
    assert str(info.value) == f"HTTP {code}: query[0]: empty; labels: x"
    with pytest.raises(InvalidRequestError) as plain:
        Exchange(BODY, None, 60.0).receive(response(code, {"detail": "not a list"}))
    assert plain.value.fields == []
    assert "plain text" not in str(plain.value)
    with pytest.raises(InvalidRequestError) as text:
        Exchange(BODY, None, 60.0).receive(response(code))
    assert ("plain text " * 50)[:300] in str(text.value)
    assert ("plain text " * 50)[:301] not in str(text.value)


@pytest.mark.parametrize("code", [301, 399, 500, 501])
def test_other_answers_are_a_server_error(code: int) -> None:
    with pytest.raises(ServerUnavailableError, match=rf"^/get_reward: HTTP {code}: a: b$"):
        Exchange(BODY, None, 60.0).receive(
            response(code, {"detail": [{"field": "a", "message": "b"}]})
        )


def test_a_json_answer_that_is_not_an_object_is_no_answer() -> None:
    with pytest.raises(ServerUnavailableError, match=r"HTTP 500: \[1, 2\]"):
        Exchange(BODY, None, 60.0).receive(httpx.Response(500, text="[1, 2]"))


def test_an_unreachable_server_is_retried_then_reported() -> None:
    assert Exchange(BODY, None, 60.0).unreachable("down") == 1.0
    with pytest.raises(ServerUnreachableError, match=r"^down$"):
        Exchange(BODY, None, 0.0).unreachable("down")


# -- against a local HTTP server -----------------------------------------------------------------


def _script() -> Recorder:
    return Recorder(
        [
            (503, answer([0.5, None, 1.0], step=0), {"Retry-After": "0"}),
            (200, answer([0.25], step=0), {}),
        ]
    )


def _check(script: Recorder, result: Rewards) -> None:
    assert result.values() == [0.5, 0.25, 1.0]
    assert result.step == 0
    assert [r[0] for r in script.requests] == ["/get_reward", "/get_reward"]
    assert [r[1].get(STEP_HEADER) for r in script.requests] == ["0", "0"]
    assert [r[1].get("Authorization") for r in script.requests] == ["Bearer k"] * 2
    assert [r[2]["query"] for r in script.requests] == [["q0", "q1", "q2"], ["q1"]]
    assert script.answers == []


def test_get_rewards_retries_the_unscored_samples() -> None:
    script = _script()
    with recording_server(script) as url:
        _check(script, get_rewards(Target(url, "k", 30.0, 60.0), BODY, 0))


def test_get_rewards_async_retries_the_unscored_samples() -> None:
    script = _script()
    with recording_server(script) as url:
        _check(script, asyncio.run(get_rewards_async(Target(url, "k", 30.0, 60.0), BODY, 0)))


@pytest.mark.parametrize("call", ["sync", "async"])
def test_the_retries_are_reward_clients_for_any_caller(call: str) -> None:
    # A training loop posting /get_reward through RewardClient itself has them too.
    async def later(url: str) -> Rewards:
        async with RewardClient(url, 30.0, "k") as client:
            return await client.get_rewards_async(BODY, 0, retry_seconds=60)

    script = _script()
    with recording_server(script) as url:
        if call == "sync":
            client = RewardClient(url, 30.0, "k")
            result = client.get_rewards(BODY, 0, retry_seconds=60)
            client.close()
        else:
            result = asyncio.run(later(url))
    _check(script, result)


def test_the_adapters_call_amaris_through_reward_client(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, int | None]] = []
    blocking, later = RewardClient.get_reward, RewardClient.get_reward_async

    def get_reward(client: RewardClient, body: Any, step: int | None = None) -> httpx.Response:
        seen.append((body, step))
        return blocking(client, body, step)

    async def get_reward_async(
        client: RewardClient, body: Any, step: int | None = None
    ) -> httpx.Response:
        seen.append((body, step))
        return await later(client, body, step)

    monkeypatch.setattr(RewardClient, "get_reward", get_reward)
    monkeypatch.setattr(RewardClient, "get_reward_async", get_reward_async)
    script = Recorder([(200, answer([1.0, 1.0, 1.0]), {})] * 2)
    with recording_server(script) as url:
        target = Target(url, "k", 30.0, 0.0)
        assert get_rewards(target, BODY, 3).values() == [1.0] * 3
        assert asyncio.run(get_rewards_async(target, BODY, None)).values() == [1.0] * 3
    sent = {"query": ["q0", "q1", "q2"], "prompts": ["p0", "p1", "p2"], "model": "m"}
    assert seen == [(sent, 3), (sent, None)]
    assert script.header("Authorization") == ["Bearer k"] * 2


def test_calls_in_a_process_share_one_connection() -> None:
    # verl calls the reward function once per sample: a client (and a TLS context) per
    # call would be costly for the trainer's CPU (amaris.integrations._clients).
    script = Recorder([(200, answer([1.0, 1.0, 1.0]), {})] * 3)
    with recording_server(script) as url:
        for _ in range(3):
            assert get_rewards(Target(url, None, 30.0, 0.0), BODY, 0).values() == [1.0] * 3
    assert len(script.ports) == 3 and len(set(script.ports)) == 1, script.ports


def test_calls_on_one_event_loop_share_a_connection_and_a_new_loop_opens_its_own() -> None:
    script = Recorder([(200, answer([0.5, 0.5, 0.5]), {})] * 4)
    with recording_server(script) as url:
        target = Target(url, None, 30.0, 0.0)

        async def three() -> list[Rewards]:
            return [await get_rewards_async(target, BODY, 0) for _ in range(3)]

        assert [r.values() for r in asyncio.run(three())] == [[0.5] * 3] * 3
        # The first loop is closed: its connection cannot serve this one's call.
        assert asyncio.run(get_rewards_async(target, BODY, 0)).values() == [0.5] * 3
    first, second = script.ports[:3], script.ports[3]
    assert len(set(first)) == 1 and second not in first, script.ports


def test_a_closed_event_loop_is_let_go_at_the_next_call() -> None:
    # A trainer that runs each batch under its own asyncio.run would otherwise keep every
    # loop it ever had, each with its client.
    script = Recorder([(200, answer([1.0, 1.0, 1.0]), {})] * 2)
    with recording_server(script) as url:
        target = Target(url, None, 30.0, 0.0)
        loop = asyncio.new_event_loop()
        loop.run_until_complete(get_rewards_async(target, BODY, 0))
        loop.close()
        gone = weakref.ref(loop)
        del loop
        asyncio.run(get_rewards_async(target, BODY, 0))
    gc.collect()
    assert gone() is None


def _rewards_in_fork(target: Target) -> Any:
    """``get_rewards`` in a process forked from this one: its values, or its error.

    ``os.fork`` itself, not ``multiprocessing``: a fork of the test process runs none of
    the after-fork hooks and exit finalizers that earlier tests' libraries registered."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, then leave at once
        try:
            answer: Any = get_rewards(target, BODY, 0).values()
        except BaseException:
            answer = traceback.format_exc()
        os.write(write, json.dumps(answer).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as reply:
        data = reply.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_a_forked_process_opens_its_own_connection() -> None:
    # Two processes writing on one inherited socket would mix their requests.
    script = Recorder([(200, answer([1.0, 1.0, 1.0]), {})] * 3)
    with recording_server(script) as url:
        target = Target(url, None, 30.0, 0.0)
        get_rewards(target, BODY, 0)
        assert _rewards_in_fork(target) == [1.0] * 3
        get_rewards(target, BODY, 0)
    parent, forked = {script.ports[0], script.ports[2]}, script.ports[1]
    assert len(parent) == 1 and forked not in parent, script.ports


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_server_is_reported_sync_and_async_without_credentials() -> None:
    port = _closed_port()
    target = Target(f"http://user:pw@127.0.0.1:{port}/x?token=t", None, 30.0, 0.0)
    shown = rf"^amaris unreachable at http://127\.0\.0\.1:{port}/x: "
    with pytest.raises(ServerUnreachableError, match=shown) as info:
        get_rewards(target, BODY, None)
    assert "pw" not in str(info.value) and "token" not in str(info.value)
    with pytest.raises(ServerUnreachableError, match=shown):
        asyncio.run(get_rewards_async(target, BODY, None))


@pytest.mark.parametrize("code", [400, 429, 502, 504])
def test_only_a_200_or_a_503_answer_gives_rewards(code: int) -> None:
    # A proxy's or an error's body that looks like an answer is not taken as one.
    exchange = Exchange(BODY, None, 60.0)
    try:
        exchange.receive(response(code, answer([1.0, 1.0, 1.0])))
    except InvalidRequestError:
        assert code == 400
    assert exchange.result.rewards == [None] * 3
    assert exchange.request() is not None
