"""The JSON files users name on the command line (``bootstrap --data``, ``replay
--manifest``): missing, binary or malformed, each refused with a message naming the
option and the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from amaris.bootstrap.data import DatasetError, load_dataset
from amaris.cli.main import main
from amaris.jsonfile import JsonFileError, read_json
from amaris.manifest import ManifestError, read_manifest

BAD = {
    "missing": None,
    "binary": b"\xfc\x80\x00\xff not text",
    "malformed": b'{"prompts": [',
}
WHY = {"missing": "No such file", "binary": "not UTF-8", "malformed": "not JSON"}


def _file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.json"
    content = BAD[kind]
    if content is not None:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("kind", sorted(BAD))
def test_each_reader_names_the_option_and_the_file(tmp_path: Path, kind: str) -> None:
    path = _file(tmp_path, kind)
    with pytest.raises(JsonFileError, match=f"^--x {path}: {WHY[kind]}"):
        read_json(path, "--x")
    with pytest.raises(DatasetError, match=f"^--data {path}: {WHY[kind]}"):
        load_dataset(path)
    with pytest.raises(ManifestError, match=f"^--manifest {path}: {WHY[kind]}"):
        read_manifest(path)


def test_a_json_value_is_read_as_is(tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    path.write_text('{"a": [1, "é"]}', encoding="utf-8")
    assert read_json(path, "--x") == {"a": [1, "é"]}


@pytest.mark.parametrize("command", ["bootstrap", "replay"])
def test_commands_refuse_a_binary_file_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = _file(tmp_path, "binary")
    option = "--data" if command == "bootstrap" else "--manifest"
    args = [command, option, str(path), "--out", str(tmp_path / "out")]
    assert main(args) == 2
    assert f"{option} {path}: not UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
