"""What the rollout log keeps of one scored rollout (:class:`RolloutRecord`).

The log stores each record as the JSON of its :meth:`RolloutRecord.to_json`: the fields a
writer set, in field order, so records read back (and archives written) are the JSON that
was logged. Fields a record of an older version lacks keep their defaults and stay out of
its JSON; fields this version does not know are kept as extra fields.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from amaris.text_fields import JSONObject, storable
from amaris.trajectory import Message, check_messages, prompt_text, trajectory_text

_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


class LoggedRollout(BaseModel):
    """The rollout as the trainer sent it (``Rollout.model_dump``); text is not re-checked:
    records of older versions must stay readable."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    input: str = ""
    output: str = ""
    supplemental_context: str | None = None
    metadata: JSONObject | None = None
    """The trainer's own metadata of the rollout: JSON of the trainer's making."""
    group_id: str | None = None

    @model_validator(mode="after")
    def _trajectory_texts(self) -> LoggedRollout:
        """A trajectory is logged as sent (its ``messages``, ``outcome``, ``finish_reason``,
        kept as extra fields, without the texts amaris derives of them): its ``input`` and
        ``output`` are derived again here for the log's readers (the analyzer, the
        canaries, memory) and stay out of the record's JSON (they are not set fields)."""
        extra = self.model_extra or {}
        if self.input or self.output or not isinstance(extra.get("messages"), list):
            return self
        try:
            messages = _MESSAGES.validate_python(extra["messages"])
            check_messages(messages)
        except ValidationError:
            return self  # not a trajectory amaris took: read as it is
        outcome, finish = extra.get("outcome"), extra.get("finish_reason")
        output = trajectory_text(
            messages,
            outcome if isinstance(outcome, dict) else None,
            finish if isinstance(finish, str) else None,
        )
        # Frozen, and not set by the record: written past both, as the derived texts are.
        object.__setattr__(self, "input", prompt_text(messages))
        object.__setattr__(self, "output", output)
        return self


class LoggedVerdict(BaseModel):
    """The judge's verdict on one criterion as logged (``CriterionResult``); fields that
    records of older versions lack keep their defaults."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str
    text: str = ""
    weight: float = 0.0
    is_anchor: bool = False
    verdict: int | float
    kind: Literal["judge", "rule"] = "judge"
    reason: str | None = None


class RolloutRecord(BaseModel):
    """One scored rollout in the log: the request, the answer, and where it was logged."""

    model_config = ConfigDict(extra="allow", frozen=True)

    scope: str = "global"
    rollout: LoggedRollout
    metadata: JSONObject = Field(default_factory=dict)
    """The request's training metadata (``TrainingMetadata``, extra fields included): JSON
    of the trainer's making."""
    score: float | None = None
    status: Literal["scored", "unscored", "invalid"] | None = None
    reason: str | None = None
    rubric_version: int | None = None
    verdicts: list[LoggedVerdict] = Field(default_factory=list)
    request_id: str | None = None
    step: int = 0
    time: float | None = None
    """Unix time it was logged."""
    late: bool = False
    """Logged after its step was completed: kept, not analysed."""
    seq: int | None = None
    """Its sequence number within the step (0, 1, 2... in append order; a hole a crash
    left stays a gap), the one the log's ``append`` returned; set when read back."""

    def to_json(self, *, seq: bool = True) -> JSONObject:
        """The record as JSON: the fields set, in field order (without ``seq`` if not
        ``seq``: the log stores a record's number beside it, not in it)."""
        return self.model_dump(mode="json", exclude_unset=True, exclude=None if seq else {"seq"})

    def dumps(self) -> str:
        """The record as the log stores it: one line of JSON text (``ensure_ascii`` off:
        text as written, readable in the ``sqlite3`` shell), without ``seq``, storable
        (:func:`~amaris.models.storable`: a lone surrogate, which only a record of an older
        version imported from a Qdrant log can hold, becomes U+FFFD; SQLite stores UTF-8
        and would refuse the whole import)."""
        return storable(json.dumps(self.to_json(seq=False), ensure_ascii=False))

    @classmethod
    def loads(cls, text: str, seq: int | None = None) -> RolloutRecord:
        """A record from its stored JSON text; ``seq`` its number within the step."""
        # json.loads, not pydantic's parser: records of older versions may hold lone
        # surrogates, and must stay readable.
        data = json.loads(text)
        return cls.model_validate(data if seq is None else {**data, "seq": seq})
