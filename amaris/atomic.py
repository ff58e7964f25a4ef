"""Files replaced whole: a reader sees the old content or the new, never a part, and a
failed write (a full disk) leaves nothing behind."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def replace_file(path: Path, chunks: Iterable[str], *, durable: bool = False) -> None:
    """Replace ``path`` with the text of ``chunks``: written under a temporary name beside
    it, then renamed over it; the temporary file is removed when anything fails.
    ``durable``: the file is fsynced before the rename, and the folder after it (so the
    rename survives a power loss)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for chunk in chunks:
                handle.write(chunk)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
