"""What the verl and OpenRLHF adapters share: where amaris is, the step, ``/get_reward``.

A call retries only what has no reward yet: when amaris answers 503 (some samples
unscored), the samples it did score are kept and the others are sent again, under the
step amaris logged the first attempt at, until ``retry_seconds`` have passed. The HTTP
clients are kept from one call to the next (:mod:`amaris.integrations._clients`).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict

import httpx

from amaris.client import (
    STEP_HEADER,
    AmarisError,
    AuthenticationError,
    InvalidRequestError,
    ServerUnavailableError,
)
from amaris.integrations._clients import async_client, sync_client
from amaris.redact import redact_url

DEFAULT_URL = "http://127.0.0.1:8002"
_RETRIED = {429, 502, 503, 504}


class RewardUnavailableError(AmarisError):
    """amaris gave no reward to some samples within the retry budget.

    ``result`` holds what was scored (``None`` where nothing was) and ``reasons`` why the
    others were not, by sample index.
    """

    def __init__(self, result: Rewards, reasons: dict[int, str]) -> None:
        first = next(iter(reasons.items()), (0, "no answer"))
        super().__init__(
            f"{len(reasons)} of {len(result.rewards)} samples unscored "
            f"(sample {first[0]}: {first[1]})"
        )
        self.result = result
        self.reasons = reasons


@dataclass(frozen=True)
class Target:
    """An amaris server and how long to wait for it."""

    url: str = DEFAULT_URL
    api_key: str | None = None
    timeout: float = 600.0
    """Seconds per HTTP request (the judge may queue)."""
    retry_seconds: float = 60.0
    """Budget for retrying unscored samples (503), overload (429) and an unreachable server."""

    @classmethod
    def resolve(
        cls,
        url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        retry_seconds: float | None = None,
    ) -> Target:
        """Arguments first, then ``AMARIS_URL`` / ``AMARIS_API_KEY``, then the defaults."""
        return cls(
            url=(url or os.environ.get("AMARIS_URL") or DEFAULT_URL).rstrip("/"),
            api_key=api_key or os.environ.get("AMARIS_API_KEY") or None,
            timeout=600.0 if timeout is None else float(timeout),
            retry_seconds=60.0 if retry_seconds is None else float(retry_seconds),
        )

    def headers(self, step: int | None) -> dict[str, str]:
        """Authorization and step headers."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        if step is not None:
            headers[STEP_HEADER] = str(step)
        return headers


def env_step() -> int | None:
    """``AMARIS_STEP`` as a step number, or None when unset.

    Raises:
        ValueError: it is not an integer >= 0.
    """
    raw = os.environ.get("AMARIS_STEP", "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ValueError(f"AMARIS_STEP must be an integer >= 0, got {raw!r}")
    return int(raw)


def optional_float(name: str, value: Any) -> float | None:
    """A float setting, or None; the error names the setting."""
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a number, got {value!r}") from exc


class GetRewardBody(TypedDict, total=False):
    """A ``/get_reward`` body (the server's ``GetRewardRequest``); a None value is left out."""

    query: Required[list[str]]
    prompts: Required[list[str]]
    labels: list[Any] | None  # the trainer's reference answers: any JSON
    group_ids: list[str] | None
    amaris_metadata: dict[str, str | int] | None  # high_level_goal, model_size, total_steps...


class _FieldError(TypedDict, total=False):
    """One entry of an error answer's ``detail``: the field (``query[3]``) and why."""

    field: str
    message: str


class _ExtraLogs(TypedDict, total=False):
    amaris_rubric_version: list[float | None]
    """Per sample, the rubric version that scored it (a JSON number)."""


class ServerAnswer(TypedDict, total=False):
    """A ``/get_reward`` answer as received (the server's ``GetRewardResponse``, or an
    error's ``{"detail"}``): the fields read here, each read leniently (a proxy or an
    older server may leave one out or answer a text ``detail``)."""

    rewards: list[float | None]
    statuses: list[str]
    step: int
    extra_logs: _ExtraLogs
    detail: list[_FieldError] | str


@dataclass
class Rewards:
    """The outcome of one exchange, per sample, in order."""

    rewards: list[float | None]
    statuses: list[str]
    rubric_versions: list[int | None]
    step: int | None = None

    def values(self) -> list[float]:
        """Every reward; an exchange returns only once each sample has one."""
        missing = [i for i, r in enumerate(self.rewards) if r is None]
        if missing:
            raise RuntimeError(f"samples {missing} have no reward")
        return [float(r) for r in self.rewards if r is not None]


@dataclass
class Exchange:
    """One ``/get_reward`` call and its retries, independent of sync or async I/O."""

    target: Target
    body: GetRewardBody
    step: int | None
    result: Rewards = field(init=False)
    _pending: list[int] = field(init=False)
    _reasons: dict[int, str] = field(init=False, default_factory=dict)
    _deadline: float = field(init=False)

    def __post_init__(self) -> None:
        size = len(self.body["query"])
        self.result = Rewards([None] * size, ["unscored"] * size, [None] * size, self.step)
        self._pending = list(range(size))
        self._deadline = time.monotonic() + self.target.retry_seconds

    # The body: GetRewardBody without its unset fields, its lists narrowed to the pending
    # samples; generic over the keys (any field a caller set passes), so of open shape.
    def request(self) -> tuple[dict[str, object], dict[str, str]] | None:
        """The next body and headers to post, or None when every sample has its answer."""
        if not self._pending:
            return None
        body = {
            key: [value[i] for i in self._pending] if isinstance(value, list) else value
            for key, value in self.body.items()
            if value is not None
        }
        return body, self.target.headers(self.result.step)

    def unreachable(self, exc: httpx.TransportError) -> float:
        """Seconds to wait before trying again after a connection error."""
        reason = f"amaris unreachable at {redact_url(self.target.url)}: {exc}"
        return self._again(1.0, dict.fromkeys(self._pending, reason), ServerUnavailableError)

    def receive(self, response: httpx.Response) -> float:
        """Record an answer; returns seconds to wait before the next request (0: none).

        Raises:
            RewardUnavailableError: samples still unscored when the budget is spent.
        """
        code = response.status_code
        if code == 401:
            raise AuthenticationError("amaris needs a valid api_key (AMARIS_API_KEY)")
        data = _json(response)
        if code == 200 or (code == 503 and "rewards" in data):
            self._record(data)
        if not self._pending:
            return 0.0
        if code in _RETRIED:
            wait = float(response.headers.get("Retry-After") or 1)
            reasons = {i: self._reasons.get(i, f"HTTP {code}") for i in self._pending}
            return self._again(wait, reasons, RewardUnavailableError)
        raw = data.get("detail")
        detail = raw if isinstance(raw, list) else []
        message = (
            "; ".join(
                f"{d.get('field')}: {d.get('message')}" for d in detail if isinstance(d, dict)
            )
            or response.text[:300]
        )
        if 400 <= code < 500:
            raise InvalidRequestError(
                code, message, [str(d.get("field")) for d in detail if isinstance(d, dict)]
            )
        raise ServerUnavailableError(f"/get_reward: HTTP {code}: {message}")

    def _record(self, data: ServerAnswer) -> None:
        sent, still = self._pending, []
        versions = data.get("extra_logs", {}).get("amaris_rubric_version", [])
        self.result.step = data.get("step", self.result.step)
        for k, index in enumerate(sent):
            self.result.statuses[index] = data["statuses"][k]
            version = versions[k]
            self.result.rubric_versions[index] = int(version) if version else None
            reward = data["rewards"][k]
            if reward is None:
                still.append(index)
            else:
                self.result.rewards[index] = float(reward)
        detail = data.get("detail") or []
        for item in detail if isinstance(detail, list) else []:
            position = _index(str(item.get("field", "")))
            if position is not None and position < len(sent):
                self._reasons[sent[position]] = str(item.get("message"))
        self._pending = still

    def _again(self, wait: float, reasons: dict[int, str], error: type[AmarisError]) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            if error is RewardUnavailableError:
                raise RewardUnavailableError(self.result, reasons)
            raise error(next(iter(reasons.values())))
        return max(0.05, min(wait, left))


def _json(response: httpx.Response) -> ServerAnswer:
    try:
        data: ServerAnswer = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _index(name: str) -> int | None:
    """``query[3]`` -> 3."""
    if name.startswith("query[") and name.endswith("]") and name[6:-1].isdigit():
        return int(name[6:-1])
    return None


def get_rewards(target: Target, body: GetRewardBody, step: int | None) -> Rewards:
    """Post ``body`` to ``/get_reward`` (blocking), retrying as the module docstring says."""
    exchange = Exchange(target, body, step)
    http = sync_client(target.url, target.timeout)
    while (request := exchange.request()) is not None:
        payload, headers = request
        try:
            wait = exchange.receive(http.post("/get_reward", json=payload, headers=headers))
        except httpx.TransportError as exc:
            wait = exchange.unreachable(exc)
        if wait:
            time.sleep(wait)
    return exchange.result


async def get_rewards_async(target: Target, body: GetRewardBody, step: int | None) -> Rewards:
    """Async :func:`get_rewards`."""

    exchange = Exchange(target, body, step)
    http = async_client(target.url, target.timeout)
    while (request := exchange.request()) is not None:
        payload, headers = request
        try:
            response = await http.post("/get_reward", json=payload, headers=headers)
            wait = exchange.receive(response)
        except httpx.TransportError as exc:
            wait = exchange.unreachable(exc)
        if wait:
            await asyncio.sleep(wait)
    return exchange.result
