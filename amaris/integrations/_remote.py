"""What the verl, OpenRLHF and TRL adapters share: where amaris is, the step, ``/get_reward``.

A call goes through :class:`amaris.client.RewardClient`, which retries what has no reward
yet (:meth:`~amaris.client.RewardClient.get_rewards`) for the target's ``retry_seconds``.
The clients are kept from one call to the next (:mod:`amaris.integrations._clients`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from amaris.client import Rewards
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
