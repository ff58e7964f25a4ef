"""JSONL log of every LLM request, written by a background thread off the event loop."""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import IO, Literal, TypedDict

from amaris.private import open_private

CallOutcome = Literal[
    "ok", "oversize", "format_refused", "transient_error", "context_overflow", "error"
]


class CallRecord(TypedDict, total=False):
    """One line of ``llm_calls.jsonl``: one request, in the order its keys are written.

    Every line has the keys up to ``structured_output`` (``account`` only when set), then
    ``latency_ms``, ``outcome`` and either ``error`` or the reply's usage."""

    time: float
    agent: str
    account: str
    """The ledger agent the usage is counted under, when not ``agent``."""
    model: str
    backend: str
    step: int | None
    request_id: str | None
    attempt: int
    reask: bool
    structured_output: str
    """The structured-output mode the request was sent in, or ``configured``."""
    rate_limit_wait_s: float
    """Seconds the request waited for its endpoint's rate limit, when it did."""
    retry_in_s: float
    latency_ms: float
    outcome: CallOutcome
    error: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    reasoning_tokens: int | None
    cached_tokens: int | None
    reasoning_chars: int
    reasoning: str
    """The reply's reasoning, cut: logged, never parsed."""


class CallLog:
    """Appends one JSON line per LLM request to ``<folder>/llm_calls.jsonl``.

    The file is opened once, here: created 0600 in a folder created 0700, never through a
    symlink (:func:`amaris.private.open_private` raises on one).
    """

    def __init__(self, folder: Path | None) -> None:
        self.path = folder / "llm_calls.jsonl" if folder is not None else None
        self._queue: queue.SimpleQueue[CallRecord | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._handle: IO[str] | None = None
        if self.path is not None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # errors="replace": an error quoting an endpoint's body may hold a lone surrogate,
            # which would otherwise stop this writer and every later line with it.
            self._handle = os.fdopen(
                open_private(self.path), "a", encoding="utf-8", errors="replace"
            )
            self._thread = threading.Thread(target=self._run, name="amaris-call-log", daemon=True)
            self._thread.start()

    def write(self, record: CallRecord) -> None:
        """Queue a record; never blocks the caller on disk."""
        if self._thread is not None:
            self._queue.put(record)

    def close(self) -> None:
        """Flush what is queued and stop the writer."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        assert self._handle is not None
        with self._handle as handle:
            while True:
                # Block for one record, then take whatever else is queued: one write and one
                # flush per burst, so the writer holds the GIL as little as possible.
                batch = [self._queue.get()]
                while not self._queue.empty() and len(batch) < 1024:
                    batch.append(self._queue.get_nowait())
                records = [r for r in batch if r is not None]
                if records:
                    handle.write(
                        "".join(
                            json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records
                        )
                    )
                    handle.flush()
                if len(records) != len(batch):
                    return
