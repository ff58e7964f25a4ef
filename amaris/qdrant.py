"""The one place that chooses the Qdrant backend: a server URL, a local folder, or memory."""

from __future__ import annotations

from pathlib import Path

from qdrant_client import QdrantClient

from amaris.settings import MemorySettings


class StoreLockedError(RuntimeError):
    """The embedded Qdrant folder is held by another process (usually a running server)."""


def open_qdrant(memory: MemorySettings, *, location: str | None = None) -> QdrantClient:
    """Open Qdrant as configured.

    Args:
        memory: ``memory.qdrant_url`` selects a server, else ``<memory.path>/qdrant``.
        location: ``":memory:"`` for tests; overrides the configuration.

    Raises:
        StoreLockedError: the local folder is open in another process.
    """
    if location is not None:
        return QdrantClient(location=location)
    if memory.qdrant_url:
        return QdrantClient(url=memory.qdrant_url)
    folder = Path(memory.path) / "qdrant"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return QdrantClient(path=str(folder))
    except RuntimeError as exc:
        if "already accessed" in str(exc):
            raise StoreLockedError(
                f"{folder} is in use by another amaris process (Qdrant local mode allows one)"
            ) from exc
        raise
