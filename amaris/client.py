"""``RewardClient``: score rollouts from a training loop; the trainer adapters call amaris
through it too (:mod:`amaris.integrations._remote`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Container, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Required, TypedDict

import httpx

from amaris.jsonfile import JSONDict
from amaris.models import (
    BatchScoreResponse,
    GetRewardBody,
    Rollout,
    ScoreRequest,
    ScoreResponse,
    TrainingMetadata,
    request_json,
)


class RolloutBody(TypedDict, total=False):
    """A rollout's JSON: the fields of :class:`amaris.models.Rollout`, which the client takes
    too and the server checks it with (a 422 names the field)."""

    id: Required[str]
    input: Required[str]
    output: Required[str]
    supplemental_context: str | None
    # Free-form metadata stored with the rollout: the trainer's JSON, open on the server too.
    metadata: JSONDict | None
    group_id: str | None


class MetadataBody(TypedDict, total=False):
    """Where the trainer is, as JSON: the fields of :class:`amaris.models.TrainingMetadata`
    (taken too), and a trainer's own keys in a ``TypedDict`` that extends this one."""

    high_level_goal: str | None
    model_size: str | None
    current_step: int
    total_steps: int | None
    other_context: str | None


class ScoreItem(TypedDict):
    """One rollout to score and where the trainer is (an item of ``/batch_score``)."""

    rollout: Rollout | RolloutBody
    metadata: TrainingMetadata | MetadataBody


class _ScoreBody(ScoreItem):
    """A ``/score`` body."""

    include_breakdown: bool


class _BatchBody(TypedDict):
    """A ``/batch_score`` body."""

    items: Sequence[ScoreItem]
    include_breakdown: bool


class _StepBody(TypedDict, total=False):
    """A ``/complete`` body: the step, or none for the server's current one."""

    step: int


class CanaryAnswer(TypedDict, total=False):
    """The rubric canary's report on a scope's candidate rubric (its probes left out)."""

    outcome: Literal["passed", "refused", "skipped"]
    reason: str
    judge_calls: int
    budget: int
    current_gap: float | None
    candidate_gap: float | None
    anchors_gap: float | None


class ScopeAnswer(TypedDict, total=False):
    """A scope's outcome in a step's run, as the server keeps it: ``outcome`` and
    ``reason`` (None when there is none) always, ``canary`` and ``retired_uninformative``
    only when set, ``strategy`` only when the updater was asked (the summary's ``hacking``
    and the ``dropped`` outputs too, unnamed here)."""

    outcome: Literal[
        "skipped", "no_update", "rejected", "unchanged", "published", "already_published"
    ]
    version: int
    base_version: int
    strategy: str | None
    reason: str | None
    canary: CanaryAnswer
    retired_uninformative: list[str]
    rollouts: int


class WaitAnswer(TypedDict):
    """``/rubric_status/wait``'s JSON answer, returned as is (the server's
    ``WaitResponse``)."""

    status: Literal["updated", "unchanged", "rejected", "failed", "pending"]
    """What the finished step did to the rubric: ``updated`` when any scope published a
    new version, else ``rejected`` when any scope's update was rejected, else
    ``unchanged``; ``failed`` when its run failed, ``pending`` when not over yet."""
    mode: Literal["global", "per_instance"]
    step: int | None
    error: str | None
    step_status: str | None
    """Where the step stands, when ``pending``."""
    scopes: dict[str, ScopeAnswer] | None
    """Per scope, once the step's run has ended."""


STEP_HEADER = "X-Amaris-Step"
"""A trainer's step on ``POST /get_reward`` (read in :mod:`amaris.api.routes.openrlhf`)."""


class AmarisError(Exception):
    """Base of every client error."""


class AuthenticationError(AmarisError):
    """401: the server needs ``api_key`` (or it is wrong)."""


class InvalidRequestError(AmarisError):
    """4xx: the request is invalid; ``fields`` names the offending fields."""

    def __init__(self, status_code: int, message: str, fields: list[str]) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.fields = fields


class ServerUnavailableError(AmarisError):
    """The server cannot be reached, timed out, or answered 5xx (or a redirect)."""


class ServerUnreachableError(ServerUnavailableError):
    """No answer: the server cannot be reached, or it timed out."""


class StepFailedError(AmarisError):
    """The step's evolution pipeline failed; ``amaris repair`` (or /complete) re-runs it."""


class RewardUnscoredError(AmarisError):
    """The judge gave no valid verdict: no reward exists for this rollout."""

    def __init__(self, result: ScoreResponse) -> None:
        super().__init__(f"rollout {result.rollout_id} unscored: {result.reason}")
        self.result = result


def raise_for_answer(path: str, response: httpx.Response, keep: Container[int] = ()) -> None:
    """Raise the error amaris's answer to ``path`` stands for, unless it is a success (2xx)
    or its status is in ``keep``: the client and the adapters read every answer so.

    Raises:
        AuthenticationError: 401.
        InvalidRequestError: another 4xx; ``fields`` names the offending fields.
        ServerUnavailableError: any other status (5xx, a redirect).
    """
    code = response.status_code
    if code == 401:
        raise AuthenticationError(
            "amaris needs a valid api_key (RewardClient's; the adapters read AMARIS_API_KEY)"
        )
    if 200 <= code < 300 or code in keep:
        return
    try:
        data = response.json()
    except ValueError:
        data = None
    listed = data.get("detail") if isinstance(data, dict) else None
    detail = [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []
    message = (
        "; ".join(f"{d.get('field')}: {d.get('message')}" for d in detail) or response.text[:300]
    )
    if 400 <= code < 500:
        raise InvalidRequestError(code, message, [str(d.get("field", "")) for d in detail])
    raise ServerUnavailableError(f"{path}: HTTP {code}: {message}")


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
        """The reward of one rollout.

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
        body: _ScoreBody = {
            "rollout": request_json(rollout, "rollout", Rollout),
            "metadata": request_json(metadata, "metadata", TrainingMetadata),
            "include_breakdown": include_breakdown,
        }
        data = await self._post("/score", body, allow_503=True)
        return ScoreResponse.model_validate(data)

    async def batch_score_async(
        self, items: Sequence[ScoreItem | ScoreRequest], include_breakdown: bool = False
    ) -> list[ScoreResponse]:
        """Score ``[{"rollout":..., "metadata":...}, ...]`` (or ``ScoreRequest`` models); one
        result per item, in order.

        Items keep their own status (``scored`` / ``unscored`` / ``invalid``).
        """
        sent = [_item(item, f"items[{i}]") for i, item in enumerate(items)]
        body: _BatchBody = {"items": sent, "include_breakdown": include_breakdown}
        data = await self._post("/batch_score", body)
        return BatchScoreResponse.model_validate(data).results

    def get_reward(self, body: GetRewardBody, step: int | None = None) -> httpx.Response:
        """``POST /get_reward`` (OpenRLHF's protocol) under ``step`` (None: the step open),
        blocking, on a connection kept for the next call; the answer is the caller's to read
        (:func:`raise_for_answer`; the adapters: :mod:`amaris.integrations._remote`).

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
        return str(self._check("/complete", response)["status"])

    async def rollouts_complete_async(self, step: int | None = None) -> str:
        """Async :meth:`rollouts_complete`."""
        return str((await self._post("/complete", _step_body(step)))["status"])

    def rubric_updated(self, step: int | None = None, timeout: float | None = None) -> WaitAnswer:
        """Block until the step's rubric evolution finished (default: the latest step).

        The server holds one wait open for ``server.max_wait_seconds`` at most, then
        answers ``pending``: this asks again (for the step the first answer named) until
        the step is done, or ``timeout`` seconds (None: no limit) have passed.

        Returns:
            The answer: its ``status`` says what the step did to the rubric (``updated``,
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
                result = self._check(
                    path, _send(http.get, path, params=_wait_params(step, _left(deadline)))
                )
                if not _ask_again(result, deadline):
                    return _wait_result(result)
                step = result.get("step", step)

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
            result = self._check(path, response)
            if not _ask_again(result, deadline):
                return _wait_result(result)
            step = result.get("step", step)

    def _sync_client(self, wait: float | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self._base_url,
            headers=self._headers,
            timeout=_http_timeout(self._timeout, wait),
        )

    async def _post(
        self, path: str, body: _ScoreBody | _BatchBody | _StepBody, allow_503: bool = False
    ) -> Any:
        return self._check(path, await _send_async(self._http.post, path, json=body), allow_503)

    @staticmethod
    def _check(path: str, response: httpx.Response, allow_503: bool = False) -> Any:
        raise_for_answer(path, response, (503,) if allow_503 else ())
        return response.json()


def _item(item: ScoreItem | ScoreRequest, field: str) -> ScoreItem:
    """A ``/batch_score`` item as the server reads it (:func:`amaris.models.request_json`)."""
    if not isinstance(item, Mapping):
        dumped: ScoreItem = request_json(item, field, ScoreRequest)
        return dumped
    sent = ScoreItem(**item)
    if "rollout" in item:
        sent["rollout"] = request_json(item["rollout"], f"{field}.rollout", Rollout)
    if "metadata" in item:
        sent["metadata"] = request_json(item["metadata"], f"{field}.metadata", TrainingMetadata)
    return sent


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


def _step_header(step: int | None) -> dict[str, str]:
    return {STEP_HEADER: str(step)} if step is not None else {}


def _step_body(step: int | None) -> _StepBody:
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


def _ask_again(result: WaitAnswer, deadline: float | None) -> bool:
    """A ``pending`` answer came before the caller's own deadline (the server's cap)."""
    return result.get("status") == "pending" and (deadline is None or time.monotonic() < deadline)


def _http_timeout(default: float, wait: float | None) -> float | None:
    # The server holds /rubric_status/wait open: the HTTP timeout must outlast the wait.
    if wait is None:
        return None
    return max(default, wait + 30.0)


def _wait_result(result: WaitAnswer) -> WaitAnswer:
    if result.get("status") == "failed":
        raise StepFailedError(f"step {result.get('step')} failed: {result.get('error')}")
    if result.get("status") == "pending":
        raise TimeoutError(f"step {result.get('step')} still {result.get('step_status')}")
    return result
