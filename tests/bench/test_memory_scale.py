"""bench/performance/memory_scale.py at its smoke size: the run fills, archives and drops the
steps out of retention, and a new process reopens the log at the last step's count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.performance import memory_scale as bench


def test_the_smoke_run_archives_old_steps_and_reopens_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench.main(["--smoke", "--folder", str(tmp_path)])
    printed = dict(
        line.split("  ", 1) for line in capsys.readouterr().out.splitlines() if "  " in line
    )
    rows = {name.strip(): value.strip() for name, value in printed.items()}
    size = bench.SMOKE
    assert rows["run"].startswith(f"{size['steps']} steps x {size['rollouts']} rollouts")
    assert f"search over {size['steps'] * size['docs']} docs" in " ".join(rows)
    assert rows["reopen in a new process (open + stores + seq recovery)"].endswith(
        f"(recovered seq {size['rollouts']})"
    )
    kept = size["steps"] - size["retention"]  # the older steps went to the archive
    archived = sorted((tmp_path / "rollouts").glob("*.jsonl"))
    assert len(archived) == kept
    for path in archived:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert len(records) == size["rollouts"]
