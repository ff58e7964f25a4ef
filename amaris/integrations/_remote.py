"""What the verl, OpenRLHF and TRL adapters share: where amaris is, the step, ``/get_reward``
(text samples) and ``/batch_score`` (agent trajectories).

A call goes through :class:`amaris.client.RewardClient`, which retries what has no reward
yet (:meth:`~amaris.client.RewardClient.get_rewards`) for the target's ``retry_seconds``;
:func:`score_rollouts` does the same for ``/batch_score`` items, which carry trajectories
(:meth:`~amaris.client.RewardClient.batch_rewards_async`).
The clients are kept from one call to the next (:mod:`amaris.integrations._clients`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from amaris.client import (
    RewardClient,
    Rewards,
    ScoreItem,
)
from amaris.integrations._clients import async_client, sync_client
from amaris.models import GetRewardBody

DEFAULT_URL = "http://127.0.0.1:8002"


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


def get_rewards(target: Target, body: GetRewardBody, step: int | None) -> Rewards:
    """Every sample's reward from ``target`` (blocking): :meth:`RewardClient.get_rewards`
    on this process's client for it."""
    client = sync_client(target.url, target.api_key, target.timeout)
    return client.get_rewards(body, step, target.retry_seconds)


async def get_rewards_async(target: Target, body: GetRewardBody, step: int | None) -> Rewards:
    """Async :func:`get_rewards`, on the running event loop's client for ``target``."""
    client = async_client(target.url, target.api_key, target.timeout)
    return await client.get_rewards_async(body, step, target.retry_seconds)


async def score_rollouts_async(target: Target, items: Sequence[ScoreItem]) -> Rewards:
    """Every item's reward from ``target``, on the running event loop's client for it.

    Raises:
        RewardUnavailableError: items still unscored when the budget is spent.
        amaris.ServerUnavailableError: amaris unreachable or failing when it is spent.
        amaris.InvalidRequestError: amaris refused an item (its reason names the field).
    """
    client = async_client(target.url, target.api_key, target.timeout)
    return await client.batch_rewards_async(items, target.retry_seconds)


def score_rollouts(target: Target, items: Sequence[ScoreItem]) -> Rewards:
    """Blocking :func:`score_rollouts_async`, on an event loop and a client of its own for
    the call (``/batch_score`` is async in :class:`RewardClient`): call it from a thread
    without a running event loop."""

    async def score() -> Rewards:
        async with RewardClient(target.url, target.timeout, target.api_key) as client:
            return await client.batch_rewards_async(items, target.retry_seconds)

    return asyncio.run(score())
