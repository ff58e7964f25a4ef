"""The one place that chooses the Qdrant backend: a server URL, a local folder, or memory.

Also the one place that creates and tunes collections (:func:`ensure_collection`).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from qdrant_client import QdrantClient, models
from qdrant_client.local.qdrant_local import QdrantLocal

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


class CollectionMismatchError(RuntimeError):
    """An existing collection has a different vector configuration than the one asked for."""


_log = logging.getLogger(__name__)
_tuning_warned = False


def tune_local_collection(client: QdrantClient, name: str) -> bool:
    """Make commits of an embedded (local-mode) collection cheap.

    Local mode commits every point to sqlite with an fsync (~2.2 ms per point).
    ``journal_mode=WAL`` + ``synchronous=NORMAL`` bring that to ~0.1 ms and keep each
    commit durable against a process crash (kill -9), not against power loss. Does
    nothing for a server or ``:memory:``. The sqlite connection is a qdrant-client
    internal; if it is not where expected, a warning is logged once and nothing changes.

    Args:
        client: Any Qdrant client.
        name: An existing collection.

    Returns:
        Whether the pragmas were applied.
    """
    global _tuning_warned
    inner = getattr(client, "_client", None)
    if not isinstance(inner, QdrantLocal) or not getattr(inner, "persistent", False):
        return False
    try:
        persistence = inner.collections[name].storage
        if persistence is None:
            raise AttributeError("storage")
        connection = persistence.storage
        if not isinstance(connection, sqlite3.Connection):
            raise TypeError(type(connection).__name__)
    except (AttributeError, KeyError, TypeError) as exc:
        if not _tuning_warned:
            _tuning_warned = True
            _log.warning(
                "cannot tune embedded Qdrant collection %s (qdrant-client internals changed: "
                "%r); each point costs an fsync",
                name,
                exc,
            )
        return False
    # journal_mode is stored in the database file; synchronous is per connection, so both
    # are applied on every open.
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return True


def _vector_size(client: QdrantClient, name: str) -> int | None:
    vectors = client.get_collection(name).config.params.vectors
    if isinstance(vectors, models.VectorParams):
        return int(vectors.size)
    if not vectors:
        return None
    raise CollectionMismatchError(f"collection {name} has named vectors {sorted(vectors)}")


def ensure_collection(client: QdrantClient, name: str, vector_size: int | None) -> None:
    """Create a collection if missing, check its vectors, and tune it.

    Args:
        client: Any Qdrant client.
        name: Collection name.
        vector_size: Size of its one unnamed cosine vector; None = payload only.

    Raises:
        CollectionMismatchError: the collection exists with another vector size.
    """
    if not client.collection_exists(name):
        if vector_size is None:
            client.create_collection(name, vectors_config={})
        else:
            client.create_collection(
                name,
                vectors_config=models.VectorParams(
                    size=vector_size, distance=models.Distance.COSINE
                ),
            )
    else:
        existing = _vector_size(client, name)
        if existing != vector_size:
            raise CollectionMismatchError(
                f"collection {name} has vector size {existing}, expected {vector_size}; "
                "use another memory.collection prefix (or delete the collection)"
            )
    tune_local_collection(client, name)


def ensure_payload_index(client: QdrantClient, name: str, field: str) -> None:
    """An integer payload index on ``field`` (filters on a Qdrant server use it; embedded
    Qdrant ignores indexes and filters in Python)."""
    if isinstance(getattr(client, "_client", None), QdrantLocal):
        return
    client.create_payload_index(name, field, field_schema=models.PayloadSchemaType.INTEGER)


def delete_points(client: QdrantClient, name: str, ids: list[models.ExtendedPointId]) -> None:
    """Delete points by id; absent ids are ignored.

    Embedded Qdrant only flags a deleted point and keeps its payload in RAM until the
    folder is reopened; over a long run of retention drops (512 rollouts a step) that is
    gigabytes. So in local mode the payloads of the points just deleted are released
    too (a qdrant-client internal, skipped if it is not where expected).
    """
    client.delete(name, points_selector=models.PointIdsList(points=ids))
    inner = getattr(client, "_client", None)
    if not isinstance(inner, QdrantLocal):
        return
    collection = inner.collections.get(name)
    index = getattr(collection, "ids", None)
    payloads = getattr(collection, "payload", None)
    deleted = getattr(collection, "deleted", None)
    if not isinstance(index, dict) or not isinstance(payloads, list) or deleted is None:
        return
    for point_id in ids:
        idx = index.get(str(point_id))
        # Only a point now flagged deleted: an upsert writes a fresh payload if it returns.
        if idx is not None and deleted[idx]:
            payloads[idx] = {}
