"""Records of the pipeline's memory: digest documents, search hits and step states."""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from amaris.jsonfile import JSONDict
from amaris.models import JSONValue

DocType = Literal["batch_summary", "meta_summary", "rubric_update", "finding"]
"""Kinds of document in the searchable digest."""

DOC_TYPES: frozenset[str] = frozenset({"batch_summary", "meta_summary", "rubric_update", "finding"})

STEP_KEY = "step"
"""Default key: a document that is the only one of its type in its step."""

SUMMARY_IDENTITIES: tuple[tuple[str, str], ...] = (
    ("meta_summary", "meta"),
    ("meta_summary", STEP_KEY),
    ("batch_summary", STEP_KEY),
    ("batch_summary", "chunk-0"),
)
"""Where a step's summary is, by ``(type, key)``, in order of preference: the meta
summary of a chunked step, else its one batch summary (``chunk-0`` when the step had a
single chunk). Other chunks' summaries are searchable but never a step's summary."""

MAX_TEXT_CHARS = 2000
"""Longest embedded text; longer texts are cut (MiniLM reads ~256 tokens anyway)."""

StepStatus = Literal["open", "completing", "done", "failed"]

HACK_PROBE_MAX_CHARS = 4000
"""Longest input, output and reference a finding keeps of its rollout (each is clipped):
enough to re-score a hack (a padded reply, a planted claim) without keeping whole
degenerate replies in memory."""


class HackProbe(BaseModel):
    """What the rubric canary needs to re-score a remembered hack: its rollout's input,
    output and reference (``supplemental_context``), each clipped to
    :data:`HACK_PROBE_MAX_CHARS` characters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rollout_id: str
    input: str
    output: str
    reference: str | None = None

    @field_validator("input", "output", "reference")
    @classmethod
    def _clip(cls, value: str | None) -> str | None:
        return None if value is None else value[:HACK_PROBE_MAX_CHARS]


class MemoryDocument(BaseModel):
    """One document of the digest memory.

    Its identity is ``(type, scope, step, key)``: writing the same identity again
    replaces the document.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: DocType
    step: int = Field(ge=0)
    scope: str = "global"
    key: str = STEP_KEY
    ids: list[str] = Field(default_factory=list)
    """Rollout ids the document is about."""
    text: str
    """The embedded text, at most :data:`MAX_TEXT_CHARS` characters."""
    doc: JSONDict = Field(default_factory=dict)  # JSON of any kind, older versions' too
    """The full JSON document (a summary, an analysis, an update...)."""
    probe: HackProbe | None = None
    """A finding's rollout, bounded, for the rubric canary to re-score the hack."""
    created_at: float = Field(default_factory=time.time)
    """Unix time of creation."""

    @field_validator("text")
    @classmethod
    def _cut(cls, value: str) -> str:
        return value[:MAX_TEXT_CHARS]


class MemoryHit(BaseModel):
    """A search result: a document and its cosine similarity to the query."""

    model_config = ConfigDict(frozen=True)

    id: str
    score: float
    document: MemoryDocument


def _unset(value: object) -> bool:
    return value is None


class StepRecord(BaseModel):
    """The state of one training step's evolution. The fields that only some steps have
    (a run's scopes, the scale-out attempt) are written only once set; fields of other
    versions are kept as extra fields."""

    model_config = ConfigDict(frozen=True, extra="allow")

    step: int = Field(ge=0)
    status: StepStatus = "open"
    rollout_count: int = Field(default=0, ge=0)
    flow_run_id: str | None = None
    rubric_versions: dict[str, int] = Field(default_factory=dict)
    """Rubric version in force per scope when the step was evolved (or published by it)."""
    error: str | None = None
    updated_at: float = Field(default_factory=time.time)
    """Unix time of the last change."""
    mode: str | None = None
    """Pipeline mode that ran the step (``async`` or ``sync``)."""
    scopes: JSONValue = Field(default=None, exclude_if=_unset)
    """The run's outcome per scope (the step flow's JSON, passed on as stored)."""
    duration_s: float | None = Field(default=None, exclude_if=_unset)
    """How long the run took, as the replica that supervised it saw it."""
    attempt: int | None = Field(default=None, exclude_if=_unset)
    """Scale-out: the number of the latest attempt submitted (from 0)."""
    executor: str | None = Field(default=None, exclude_if=_unset)
    """Scale-out: the replica that started the latest attempt (it restarts it)."""
    audit: JSONValue = Field(default=None, exclude_if=_unset)
    """The audit judge's figures of the step (the JSON of
    :class:`amaris.trust.audit.models.StepAudit`, which
    :func:`amaris.trust.audit.history.audit_of` reads back)."""
