"""JSONL log of every LLM request, written by a background thread off the event loop."""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from typing import Any


class CallLog:
    """Appends one JSON line per LLM request to ``<folder>/llm_calls.jsonl``."""

    def __init__(self, folder: Path | None) -> None:
        self.path = folder / "llm_calls.jsonl" if folder is not None else None
        self._queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._thread = threading.Thread(target=self._run, name="amaris-call-log", daemon=True)
            self._thread.start()

    def write(self, record: dict[str, Any]) -> None:
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
        assert self.path is not None
        # errors="replace": an error quoting an endpoint's body may hold a lone surrogate,
        # which would otherwise stop this writer and every later line with it.
        with self.path.open("a", encoding="utf-8", errors="replace") as handle:
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
