"""``RewardClient``: score rollouts from a training loop."""

from __future__ import annotations

from types import TracebackType
from typing import Any

import httpx

from amaris.models import BatchScoreResponse, ScoreResponse


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
    """The server cannot be reached, timed out, or answered 5xx."""


class RewardUnscoredError(AmarisError):
    """The judge gave no valid verdict: no reward exists for this rollout."""

    def __init__(self, result: ScoreResponse) -> None:
        super().__init__(f"rollout {result.rollout_id} unscored: {result.reason}")
        self.result = result


class RewardClient:
    """Async client of an amaris server.

    Example::

        async with RewardClient("http://127.0.0.1:8002") as client:
            reward = await client.score_async(rollout, metadata)
    """

    def __init__(
        self, base_url: str = "http://127.0.0.1:8002", timeout: float = 600.0,
        api_key: str | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout,
                                       headers=headers)

    async def __aenter__(self) -> RewardClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def score_async(self, rollout: dict[str, Any], metadata: dict[str, Any]) -> float:
        """The reward of one rollout.

        Raises:
            RewardUnscoredError: the judge could not score it (never a made-up value).
        """
        result = await self.score_detailed_async(rollout, metadata)
        if result.status != "scored" or result.score is None:
            raise RewardUnscoredError(result)
        return result.score

    async def score_detailed_async(
        self, rollout: dict[str, Any], metadata: dict[str, Any], include_breakdown: bool = False
    ) -> ScoreResponse:
        """The whole /score answer: score, status, rubric version, optional breakdown."""
        body = {"rollout": rollout, "metadata": metadata, "include_breakdown": include_breakdown}
        data = await self._post("/score", body, allow_503=True)
        return ScoreResponse.model_validate(data)

    async def batch_score_async(
        self, items: list[dict[str, Any]], include_breakdown: bool = False
    ) -> list[ScoreResponse]:
        """Score ``[{"rollout":..., "metadata":...}, ...]``; one result per item, in order.

        Items keep their own status (``scored`` / ``unscored`` / ``invalid``).
        """
        data = await self._post("/batch_score",
                                {"items": items, "include_breakdown": include_breakdown})
        return BatchScoreResponse.model_validate(data).results

    async def _post(self, path: str, body: dict[str, Any], allow_503: bool = False) -> Any:
        try:
            response = await self._http.post(path, json=body)
        except httpx.TimeoutException as exc:
            raise ServerUnavailableError(f"{path}: timed out: {exc}") from exc
        except httpx.TransportError as exc:
            raise ServerUnavailableError(f"{path}: cannot reach the server: {exc}") from exc
        if response.status_code == 401:
            raise AuthenticationError("the server needs a valid api_key")
        if response.status_code == 503 and allow_503:
            return response.json()
        if 400 <= response.status_code < 500:
            try:
                detail = response.json().get("detail", [])
            except ValueError:
                detail = []
            fields = [d.get("field", "") for d in detail if isinstance(d, dict)]
            message = "; ".join(f"{d.get('field')}: {d.get('message')}" for d in detail
                                if isinstance(d, dict)) or response.text[:300]
            raise InvalidRequestError(response.status_code, message, fields)
        if response.status_code >= 500:
            raise ServerUnavailableError(f"{path}: HTTP {response.status_code}: "
                                         f"{response.text[:300]}")
        return response.json()
