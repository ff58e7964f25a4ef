"""What the client raises, and the error each answer of amaris that is not a success stands for."""

from __future__ import annotations

from collections.abc import Container
from typing import TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from amaris.models import ScoreResponse

M = TypeVar("M", bound=BaseModel)


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


class UnexpectedAnswerError(AmarisError):
    """A success this client cannot read: not JSON, or not the answer's model (a server of
    another version, or not amaris, at the address)."""


class RewardUnscoredError(AmarisError):
    """The judge gave no valid verdict: no reward exists for this rollout."""

    def __init__(self, result: ScoreResponse) -> None:
        super().__init__(f"rollout {result.rollout_id} unscored: {result.reason}")
        self.result = result


def raise_for_answer(path: str, response: httpx.Response, keep: Container[int] = ()) -> None:
    """Raise the error amaris's answer to ``path`` stands for, unless it is a success (2xx)
    or its status is in ``keep``: the client reads every answer so.

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


def answer_json(path: str, response: httpx.Response) -> object:
    """The JSON of a success to ``path``.

    Raises:
        UnexpectedAnswerError: the body is not JSON.
    """
    try:
        return response.json()
    except ValueError as exc:
        raise UnexpectedAnswerError(f"{path}: the answer is not JSON: {exc}") from exc


def read_answer(path: str, model: type[M], data: object) -> M:
    """``data``, the JSON of a success to ``path``, as ``model``.

    Raises:
        UnexpectedAnswerError: it is not ``model``'s JSON (names the first field at fault).
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the answer"
        raise UnexpectedAnswerError(
            f"{path}: this client cannot read the answer as {model.__name__} "
            f"({exc.error_count()} error(s); {where}: {first['msg']})"
        ) from exc
