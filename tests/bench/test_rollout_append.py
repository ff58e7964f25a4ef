"""bench/performance/rollout_append.py at its smoke size: every backend takes the records one
at a time and in batches, and holds each one afterwards."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.performance import rollout_append as bench


def test_the_smoke_run_logs_every_record_on_every_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # its temporary folders go under the current one
    bench.main(["--smoke"])
    lines = capsys.readouterr().out.splitlines()
    found = {}
    for line in lines:
        match = re.fullmatch(
            r"([\w-]+): one at a time: [\d.]+ ms per append; batches of 2: [\d.]+ ms per "
            r"append, [\d.]+ ms per record; (\d+) records logged",
            line,
        )
        if match:
            found[match.group(1)] = int(match.group(2))
    assert found == {name: 4 + 4 for name in bench.BACKENDS}  # 4 one by one, 2 batches of 2
    assert list(tmp_path.iterdir()) == []
