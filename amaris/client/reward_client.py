"""``RewardClient``: score rollouts from a training loop and control its steps; the trainer
adapters call amaris through it too (:mod:`amaris.integrations`). Every HTTP call, the error
each answer stands for (:func:`~amaris.client.errors.raise_for_answer`) and the retries of
``/get_reward`` (:mod:`amaris.client.rewards`) are here."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx

from amaris.client.answers import WaitAnswer
from amaris.client.bodies import (
    STEP_HEADER,
    BatchBody,
    MetadataBody,
    RolloutBody,
    ScoreBody,
    ScoreItem,
    StepBody,
    request_json,
    score_item,
)
from amaris.client.errors import (
    InvalidRequestError,
    RewardUnscoredError,
    ServerUnavailableError,
    ServerUnreachableError,
    StepFailedError,
    UnexpectedAnswerError,
    answer_json,
    raise_for_answer,
    read_answer,
)
from amaris.client.rewards import BatchExchange, Exchange, Rewards
from amaris.models import (
    BatchScoreResponse,
    GetRewardBody,
    Rollout,
    ScoreRequest,
    ScoreResponse,
    TrainingMetadata,
)
from amaris.redact import redact_url


class RewardClient:
    """Client of an amaris server (async; the step control and ``/get_reward`` also block).

    Example::

        async with RewardClient("http://127.0.0.1:8002") as client:
            reward = await client.score_async(rollout, metadata)
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8002",
        timeout: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._base_url = base_url.rstrip("/")
        self._timeout = timeout
        self._headers = headers
        self._http = httpx.AsyncClient(base_url=self._base_url, timeout=timeout, headers=headers)
        # Made at the first blocking call: a client builds a TLS context, which costs.
        self._blocking: httpx.Client | None = None
        self._lock = threading.Lock()

    async def __aenter__(self) -> RewardClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pools."""
        self.close()
        await self._http.aclose()

    def close(self) -> None:
        """Close the connection pool of the blocking calls."""
        with self._lock:
            if self._blocking is not None:
                self._blocking.close()
                self._blocking = None

    async def score_async(
        self, rollout: Rollout | RolloutBody, metadata: TrainingMetadata | MetadataBody
    ) -> float:
        """The reward of one rollout: a prompt and a response, or an agent's trajectory
        (``messages``, with an optional ``outcome`` and ``finish_reason``), as a model or JSON.

        Raises:
            RewardUnscoredError: the judge could not score it (never a made-up value).
            TypeError: ``rollout`` or ``metadata`` is neither its model nor JSON.
        """
        result = await self.score_detailed_async(rollout, metadata)
        if result.status != "scored" or result.score is None:
            raise RewardUnscoredError(result)
        return result.score

    async def score_detailed_async(
        self,
        rollout: Rollout | RolloutBody,
        metadata: TrainingMetadata | MetadataBody,
        include_breakdown: bool = False,
    ) -> ScoreResponse:
        """The whole /score answer: score, status, rubric version, optional breakdown."""
        body: ScoreBody = {
            "rollout": request_json(rollout, "rollout", Rollout),
            "metadata": request_json(metadata, "metadata", TrainingMetadata),
            "include_breakdown": include_breakdown,
        }
        data = await self._post("/score", body, allow_503=True)
        return read_answer("/score", ScoreResponse, data)

    async def batch_score_async(
        self, items: Sequence[ScoreItem | ScoreRequest], include_breakdown: bool = False
    ) -> list[ScoreResponse]:
        """Score ``[{"rollout":..., "metadata":...}, ...]`` (or ``ScoreRequest`` models); one
        result per item, in order.

        Items keep their own status (``scored`` / ``unscored`` / ``invalid``).
        """
        sent = [score_item(item, f"items[{i}]") for i, item in enumerate(items)]
        body: BatchBody = {"items": sent, "include_breakdown": include_breakdown}
        data = await self._post("/batch_score", body)
        return read_answer("/batch_score", BatchScoreResponse, data).results

    async def batch_rewards_async(
        self, items: Sequence[ScoreItem | ScoreRequest], retry_seconds: float = 60.0
    ) -> Rewards:
        """Every item's reward through ``/batch_score``, as :meth:`get_rewards` gives
        ``/get_reward``'s: items left unscored are sent again, and an overloaded, failing or
        unreachable server asked again, until ``retry_seconds`` have passed
        (:class:`~amaris.client.rewards.BatchExchange`).

        Raises:
            RewardUnavailableError: items still unscored when the budget is spent.
            ServerUnavailableError, ServerUnreachableError: still failing when it is spent.
            InvalidRequestError: amaris refused an item (its reason names the field).
        """
        exchange = BatchExchange(len(items), retry_seconds)
        while exchange.pending:
            try:
                answers = await self.batch_score_async([items[i] for i in exchange.pending])
            except (InvalidRequestError, ServerUnavailableError) as error:
                wait = exchange.failed(error)
            else:
                wait = exchange.receive(answers)
            if wait:
                await asyncio.sleep(wait)
        return exchange.result

    # -- /get_reward (OpenRLHF's protocol): what the trainer adapters call ---------------
    def get_rewards(
        self, body: GetRewardBody, step: int | None = None, retry_seconds: float = 60.0
    ) -> Rewards:
        """The reward of every sample of ``body`` (blocking), under ``step`` (None: the step
        open). Samples amaris left unscored (503) are sent again, under the step it logged
        the first attempt at, and an overloaded (429), failing gateway (502, 504) or
        unreachable server is asked again, until ``retry_seconds`` have passed
        (:mod:`amaris.client.rewards`).

        Raises:
            RewardUnavailableError: samples still unscored when the budget is spent (its
                ``result`` holds what was scored).
            ServerUnreachableError: still no answer when the budget is spent.
            AuthenticationError, InvalidRequestError: amaris refused the request.
            ServerUnavailableError: another answer that is neither a success nor retried.
        """
        exchange = Exchange(body, step, retry_seconds)
        while (request := exchange.request()) is not None:
            try:
                wait = exchange.receive(self.get_reward(*request))
            except ServerUnreachableError as error:
                wait = exchange.unreachable(self._unreachable(error))
            if wait:
                time.sleep(wait)
        return exchange.result

    async def get_rewards_async(
        self, body: GetRewardBody, step: int | None = None, retry_seconds: float = 60.0
    ) -> Rewards:
        """Async :meth:`get_rewards`."""
        exchange = Exchange(body, step, retry_seconds)
        while (request := exchange.request()) is not None:
            try:
                wait = exchange.receive(await self.get_reward_async(*request))
            except ServerUnreachableError as error:
                wait = exchange.unreachable(self._unreachable(error))
            if wait:
                await asyncio.sleep(wait)
        return exchange.result

    def get_reward(self, body: GetRewardBody, step: int | None = None) -> httpx.Response:
        """One ``POST /get_reward`` under ``step`` (None: the step open), blocking, on a
        connection kept for the next call; the answer is the caller's to read
        (:func:`~amaris.client.errors.raise_for_answer`), without retries
        (:meth:`get_rewards` retries).

        Raises:
            ServerUnreachableError: no answer.
        """
        with self._lock:
            if self._blocking is None:
                self._blocking = httpx.Client(
                    base_url=self._base_url, timeout=self._timeout, headers=self._headers
                )
            http = self._blocking
        return _send(http.post, "/get_reward", json=body, headers=_step_header(step))

    async def get_reward_async(
        self, body: GetRewardBody, step: int | None = None
    ) -> httpx.Response:
        """Async :meth:`get_reward`."""
        headers = _step_header(step)
        return await _send_async(self._http.post, "/get_reward", json=body, headers=headers)

    # -- step control (AMARIS API) ---------------------------------------------------
    def rollouts_complete(self, step: int | None = None) -> str:
        """Signal that the step's rollouts are all scored (manual mode); blocking.

        Returns:
            ``complete``, or ``noop`` when the server completes steps by itself.
        """
        with self._sync_client() as http:
            response = _send(http.post, "/complete", json=_step_body(step))
        return _status("/complete", self._check("/complete", response))

    async def rollouts_complete_async(self, step: int | None = None) -> str:
        """Async :meth:`rollouts_complete`."""
        return _status("/complete", await self._post("/complete", _step_body(step)))

    def rubric_updated(self, step: int | None = None, timeout: float | None = None) -> WaitAnswer:
        """Block until the step's rubric evolution finished (default: the latest step).

        The server holds one wait open for ``server.max_wait_seconds`` at most, then
        answers ``pending``: this asks again (for the step the first answer named) until
        the step is done, or ``timeout`` seconds (None: no limit) have passed.

        Returns:
            The server's answer as its model (:class:`~amaris.step_answer.WaitAnswer`):
            its ``status`` says what the step did to the rubric (``updated``,
            ``unchanged`` or ``rejected``), ``scopes`` each scope's outcome and reason.

        Raises:
            StepFailedError: the step's pipeline failed.
            TimeoutError: ``timeout`` seconds passed first.
            InvalidRequestError: 404, the server does not know ``step``.
        """
        path = "/rubric_status/wait"
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._sync_client(timeout) as http:
            while True:
                params = _wait_params(step, _left(deadline))
                answer = read_answer(
                    path, WaitAnswer, self._check(path, _send(http.get, path, params=params))
                )
                if not _ask_again(answer, deadline):
                    return _wait_result(answer)
                step = answer.step

    async def rubric_updated_async(
        self, step: int | None = None, timeout: float | None = None
    ) -> WaitAnswer:
        """Async :meth:`rubric_updated`."""
        path = "/rubric_status/wait"
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            params = _wait_params(step, _left(deadline))
            wait = _http_timeout(self._timeout, timeout)
            response = await _send_async(self._http.get, path, params=params, timeout=wait)
            answer = read_answer(path, WaitAnswer, self._check(path, response))
            if not _ask_again(answer, deadline):
                return _wait_result(answer)
            step = answer.step

    def _sync_client(self, wait: float | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self._base_url,
            headers=self._headers,
            timeout=_http_timeout(self._timeout, wait),
        )

    def _unreachable(self, error: ServerUnreachableError) -> str:
        return f"amaris unreachable at {redact_url(self._base_url)}: {error.__cause__ or error}"

    async def _post(
        self, path: str, body: ScoreBody | BatchBody | StepBody, allow_503: bool = False
    ) -> Any:
        return self._check(path, await _send_async(self._http.post, path, json=body), allow_503)

    @staticmethod
    def _check(path: str, response: httpx.Response, allow_503: bool = False) -> Any:
        raise_for_answer(path, response, (503,) if allow_503 else ())
        return answer_json(path, response)


def _send(method: Any, path: str, **kwargs: Any) -> httpx.Response:
    try:
        response: httpx.Response = method(path, **kwargs)
    except httpx.TransportError as exc:
        raise ServerUnreachableError(f"{path}: {exc}") from exc
    return response


async def _send_async(method: Any, path: str, **kwargs: Any) -> httpx.Response:
    try:
        response: httpx.Response = await method(path, **kwargs)
    except httpx.TransportError as exc:
        raise ServerUnreachableError(f"{path}: {exc}") from exc
    return response


def _status(path: str, data: object) -> str:
    """The ``status`` of a success to ``path``.

    Raises:
        UnexpectedAnswerError: the answer has none.
    """
    status = data.get("status") if isinstance(data, dict) else None
    if not isinstance(status, str):
        raise UnexpectedAnswerError(f"{path}: the answer has no status")
    return status


def _step_header(step: int | None) -> dict[str, str]:
    return {STEP_HEADER: str(step)} if step is not None else {}


def _step_body(step: int | None) -> StepBody:
    return {"step": step} if step is not None else {}


def _wait_params(step: int | None, timeout: float | None) -> dict[str, float]:
    params: dict[str, float] = {}
    if step is not None:
        params["step"] = step
    if timeout is not None:
        params["timeout"] = timeout
    return params


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (at least a millisecond), None for no deadline."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.001)


def _ask_again(answer: WaitAnswer, deadline: float | None) -> bool:
    """A ``pending`` answer came before the caller's own deadline (the server's cap)."""
    return answer.status == "pending" and (deadline is None or time.monotonic() < deadline)


def _http_timeout(default: float, wait: float | None) -> float | None:
    # The server holds /rubric_status/wait open: the HTTP timeout must outlast the wait.
    if wait is None:
        return None
    return max(default, wait + 30.0)


def _wait_result(answer: WaitAnswer) -> WaitAnswer:
    if answer.status == "failed":
        raise StepFailedError(f"step {answer.step} failed: {answer.error}")
    if answer.status == "pending":
        raise TimeoutError(f"step {answer.step} still {answer.step_status}")
    return answer
