"""A file replaced whole: the old content or the new, and nothing left behind on failure."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from amaris.atomic import replace_file


@pytest.mark.parametrize("durable", [False, True])
def test_a_file_is_replaced_whole(tmp_path: Path, durable: bool) -> None:
    path = tmp_path / "a" / "b.json"
    replace_file(path, ["{", '"x": 1', "}"], durable=durable)
    replace_file(path, ["new"], durable=durable)
    assert path.read_text() == "new"
    assert sorted(p.name for p in path.parent.iterdir()) == ["b.json"]


@pytest.mark.parametrize("durable", [False, True])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_one(
    tmp_path: Path, durable: bool
) -> None:
    path = tmp_path / "b.json"
    path.write_text("old")

    def full_disk() -> Iterator[str]:
        yield "half"
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        replace_file(path, full_disk(), durable=durable)
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json"]
