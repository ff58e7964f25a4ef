"""What an endpoint's response headers say of its rate limits.

OpenAI (and vLLM behind a gateway, OpenRouter, Azure...) answer with
``x-ratelimit-limit-requests`` / ``-tokens`` (the limit a minute),
``x-ratelimit-remaining-requests`` / ``-tokens`` (what is left now) and
``x-ratelimit-reset-requests`` / ``-tokens`` (how long until it is whole again, as ``1s``,
``6m0s``, ``20ms`` or plain seconds), and with a 429 ``retry-after`` (seconds or an HTTP
date) or ``retry-after-ms``. The values are the endpoint's text: each is read only when
short (:data:`MAX_VALUE_CHARS`), with plain string operations, never a regex.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

MAX_VALUE_CHARS = 40
"""Longest header value read; a longer one is ignored."""
_UNITS = (("ms", 0.001), ("h", 3600.0), ("m", 60.0), ("s", 1.0))
"""Duration units, ``ms`` before ``m`` and ``s`` (a unit is read by what the text ends with)."""


@dataclass(frozen=True)
class RateHeaders:
    """The rate-limit headers of one response; None where the response had none."""

    limit_requests: int | None = None
    limit_tokens: int | None = None
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests: float | None = None
    """Seconds until the request limit is whole again."""
    reset_tokens: float | None = None
    """Seconds until the token limit is whole again."""
    retry_after: float | None = None
    """Seconds the endpoint asked to wait (``retry-after-ms``, else ``retry-after``)."""

    @property
    def wait(self) -> float | None:
        """Seconds to hold new requests by what these say: ``retry_after``, else the reset
        of each limit with nothing remaining (the longest); None when nothing says to."""
        if self.retry_after is not None:
            return self.retry_after
        resets = [
            reset
            for remaining, reset in (
                (self.remaining_requests, self.reset_requests),
                (self.remaining_tokens, self.reset_tokens),
            )
            if remaining == 0 and reset is not None
        ]
        return max(resets) if resets else None


def read_rate_headers(headers: Mapping[str, str]) -> RateHeaders | None:
    """The rate-limit headers among ``headers`` (names in any case, as HTTP headers are
    matched: pass a case-insensitive mapping); None when there are none."""
    read = RateHeaders(
        limit_requests=_count(headers.get("x-ratelimit-limit-requests")),
        limit_tokens=_count(headers.get("x-ratelimit-limit-tokens")),
        remaining_requests=_count(headers.get("x-ratelimit-remaining-requests")),
        remaining_tokens=_count(headers.get("x-ratelimit-remaining-tokens")),
        reset_requests=duration(headers.get("x-ratelimit-reset-requests")),
        reset_tokens=duration(headers.get("x-ratelimit-reset-tokens")),
        retry_after=_retry_after(headers.get("retry-after-ms"), headers.get("retry-after")),
    )
    return None if read == _NONE else read


_NONE = RateHeaders()


def _count(value: str | None) -> int | None:
    """A non-negative integer header (``600``; ``600.0`` read down), else None."""
    if value is None or len(value) > MAX_VALUE_CHARS:
        return None
    number = _number(value.strip())
    return None if number is None else int(number)


def _number(text: str) -> float | None:
    """``text`` as a finite number ≥ 0, else None."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def duration(value: str | None) -> float | None:
    """Seconds of a duration header: plain seconds (``1.5``) or Go's spelling (``1h2m3.5s``,
    ``6m0s``, ``20ms``); None for anything else."""
    if value is None or len(value) > MAX_VALUE_CHARS:
        return None
    text = value.strip().lower()
    if not text:
        return None
    plain = _number(text)
    if plain is not None:
        return plain
    seconds = 0.0
    while text:
        # The number at the head, then its unit.
        end = 0
        while end < len(text) and (text[end].isdigit() or text[end] == "."):
            end += 1
        number = _number(text[:end]) if end else None
        if number is None:
            return None
        text = text[end:]
        for unit, scale in _UNITS:
            if text.startswith(unit):
                seconds += number * scale
                text = text[len(unit) :]
                break
        else:
            return None
    return seconds


def _retry_after(milliseconds: str | None, value: str | None) -> float | None:
    """``retry-after-ms`` in seconds, else ``retry-after``: seconds, or an HTTP date (the
    seconds until it, 0 when it has passed)."""
    if milliseconds is not None and len(milliseconds) <= MAX_VALUE_CHARS:
        number = _number(milliseconds.strip())
        if number is not None:
            return number / 1000
    if value is None or len(value) > MAX_VALUE_CHARS:
        return None
    number = _number(value.strip())
    if number is not None:
        return number
    try:
        moment = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, moment.timestamp() - time.time())
