"""What the hot path refuses before judging: a field or batch over its size limit, and
work over the judge's queue bound. The routes answer them 413 and 429 (:mod:`api.errors`)."""

from __future__ import annotations

from amaris.trust.judging import JudgeRefusedError


class OverloadedError(JudgeRefusedError, RuntimeError):
    """The hot path holds ``scoring.max_pending`` judge calls already."""


class OversizeError(JudgeRefusedError, ValueError):
    """A rollout field is longer than ``scoring.max_field_chars`` (or a batch too long)."""

    def __init__(
        self, path: tuple[str, ...], size: int, limit: int, unit: str = "characters"
    ) -> None:
        field = ".".join(path)
        super().__init__(f"{field} has {size} {unit}; the limit is {limit}")
        self.path = path
        self.field = field
