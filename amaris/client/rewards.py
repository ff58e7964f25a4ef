"""One ``/get_reward`` exchange and its retries, and the same for ``/batch_score`` items,
independent of sync or async I/O (:meth:`amaris.client.RewardClient.get_rewards` and
:meth:`~amaris.client.RewardClient.batch_rewards_async` do the I/O).

Only what has no reward yet is retried: when amaris answers 503 (some samples unscored), the
samples it did score are kept and the others are sent again, under the step amaris logged the
first attempt at; an overloaded (429), unreachable or gateway-failed (502, 504) server is
asked again too, until the retry budget is spent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TypedDict, cast

import httpx

from amaris.client.errors import (
    AmarisError,
    InvalidRequestError,
    ServerUnavailableError,
    ServerUnreachableError,
    UnexpectedAnswerError,
    raise_for_answer,
)
from amaris.models import GetRewardBody, RewardVector, ScoreResponse

RETRIED = frozenset({429, 502, 503, 504})
"""Answers asked again within the budget."""


@dataclass
class Rewards:
    """The outcome of one exchange, per sample, in order."""

    rewards: list[float | None]
    statuses: list[str]
    rubric_versions: list[int | None]
    step: int | None = None
    reward_vectors: list[RewardVector | None] | None = None
    """Per sample, its reward per objective (``/score``'s ``rewards``; None for a sample
    without a reward yet); None when the server sent none (a server older than them)."""

    def values(self) -> list[float]:
        """Every reward; an exchange returns only once each sample has one."""
        missing = [i for i, r in enumerate(self.rewards) if r is None]
        if missing:
            raise RuntimeError(f"samples {missing} have no reward")
        return [float(r) for r in self.rewards if r is not None]


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
    reward_vectors: list[RewardVector | None]
    detail: list[_FieldError] | str


@dataclass
class Exchange:
    """One ``/get_reward`` call and its retries: what to send next, and what each answer
    (or its absence) means."""

    body: GetRewardBody
    step: int | None
    retry_seconds: float
    """Budget for retrying unscored samples (503), overload (429) and an unreachable server."""
    result: Rewards = field(init=False)
    _pending: list[int] = field(init=False)
    _reasons: dict[int, str] = field(init=False, default_factory=dict)
    _deadline: float = field(init=False)

    def __post_init__(self) -> None:
        size = len(self.body["query"])
        self.result = Rewards([None] * size, ["unscored"] * size, [None] * size, self.step)
        self._pending = list(range(size))
        self._deadline = time.monotonic() + self.retry_seconds

    def request(self) -> tuple[GetRewardBody, int | None] | None:
        """The next body to post and its step, or None when every sample has its answer:
        the body without its None fields, its lists narrowed to the pending samples."""
        if not self._pending:
            return None
        # Generic over the keys: any field a caller set passes, narrowed if it is a list.
        body = {
            key: [value[i] for i in self._pending] if isinstance(value, list) else value
            for key, value in self.body.items()
            if value is not None
        }
        return cast(GetRewardBody, body), self.result.step

    def unreachable(self, reason: str) -> float:
        """Seconds to wait before trying again after no answer came (``reason``).

        Raises:
            ServerUnreachableError: the budget is spent; its message is ``reason``.
        """
        return self._again(1.0, dict.fromkeys(self._pending, reason), ServerUnreachableError)

    def receive(self, response: httpx.Response) -> float:
        """Record an answer; returns seconds to wait before the next request (0: none).

        Raises:
            RewardUnavailableError: samples still unscored when the budget is spent.
            AmarisError: an answer neither 2xx nor to retry (:func:`raise_for_answer`).
        """
        raise_for_answer("/get_reward", response, RETRIED)
        code = response.status_code
        data = _json(response)
        if code == 200 or (code == 503 and "rewards" in data):
            self._record(data)
        if not self._pending:
            return 0.0
        if code in RETRIED:
            wait = float(response.headers.get("Retry-After") or 1)
            reasons = {i: self._reasons.get(i, f"HTTP {code}") for i in self._pending}
            return self._again(wait, reasons, RewardUnavailableError)
        raise ServerUnavailableError(f"/get_reward: HTTP {code} left samples without a reward")

    def _record(self, data: ServerAnswer) -> None:
        sent, still = self._pending, []
        rewards, statuses = data.get("rewards"), data.get("statuses")
        if not (
            isinstance(rewards, list)
            and isinstance(statuses, list)
            and min(len(rewards), len(statuses)) >= len(sent)
        ):
            raise UnexpectedAnswerError(
                f"/get_reward: the answer has no reward and status for each of the "
                f"{len(sent)} samples sent"
            )
        versions = data.get("extra_logs", {}).get("amaris_rubric_version", [])
        vectors = data.get("reward_vectors")
        if vectors is not None and self.result.reward_vectors is None:
            self.result.reward_vectors = [None] * len(self.result.rewards)
        self.result.step = data.get("step", self.result.step)
        for k, index in enumerate(sent):
            self.result.statuses[index] = statuses[k]
            version = versions[k] if k < len(versions) else None
            self.result.rubric_versions[index] = int(version) if version else None
            reward = rewards[k]
            if reward is None:
                still.append(index)
            else:
                self.result.rewards[index] = float(reward)
            if vectors is not None and self.result.reward_vectors is not None:
                self.result.reward_vectors[index] = vectors[k]
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


@dataclass
class BatchExchange:
    """Items scored through ``/batch_score`` until each has a reward: an item left without
    one (unscored, and ``scoring.on_failure`` is not ``neutral``) is sent again, as are all
    of them while amaris is overloaded (429), failing (5xx) or unreachable, until
    ``retry_seconds`` have passed; an item amaris refuses (``invalid``) is an error at once."""

    size: int
    retry_seconds: float
    result: Rewards = field(init=False)
    pending: list[int] = field(init=False)
    """The items (by index) still to send."""
    _reasons: dict[int, str] = field(init=False)
    _deadline: float = field(init=False)

    def __post_init__(self) -> None:
        size = self.size
        self.result = Rewards([None] * size, ["unscored"] * size, [None] * size, None)
        self.result.reward_vectors = [None] * size
        self.pending = list(range(size))
        self._reasons = dict.fromkeys(self.pending, "no answer")
        self._deadline = time.monotonic() + self.retry_seconds

    def receive(self, answers: list[ScoreResponse]) -> float:
        """Record the answers to the pending items; returns seconds to wait before sending
        those still pending (0: none are).

        Raises:
            InvalidRequestError: amaris refused an item (its reason names the field).
            RewardUnavailableError: items still unscored when the budget is spent.
        """
        still = []
        for index, answer in zip(self.pending, answers, strict=True):
            if answer.status == "invalid":
                reason = answer.reason or "invalid"
                raise InvalidRequestError(422, reason, [reason.partition(": ")[0]])
            self.result.statuses[index] = answer.status
            self.result.rubric_versions[index] = answer.rubric_version
            if self.result.reward_vectors is not None:
                self.result.reward_vectors[index] = answer.rewards
            self.result.rewards[index] = answer.score
            if answer.score is None:
                self._reasons[index] = answer.reason or answer.status
                still.append(index)
        self.pending = still
        if not still:
            return 0.0
        return self._again(RewardUnavailableError(self.result, self._still()))

    def failed(self, error: AmarisError) -> float:
        """Seconds to wait after ``error`` (overloaded, failing or unreachable).

        Raises:
            AmarisError: ``error`` itself when the budget is spent, or at once when it is
                a refusal other than overload (429).
        """
        if isinstance(error, InvalidRequestError) and error.status_code != 429:
            raise error
        return self._again(error)

    def _still(self) -> dict[int, str]:
        return {i: self._reasons[i] for i in self.pending}

    def _again(self, error: AmarisError) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise error
        return max(0.05, min(1.0, left))


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
