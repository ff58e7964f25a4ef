"""bench/probes/degenerate_replies.py at its smoke size: every family in every field through
the app in a worker process, then a real amaris serve under load and SIGTERM; the section's
verdicts those of what it measured."""

from __future__ import annotations

import ast
import re
import tempfile
from pathlib import Path

import pytest

from bench.probes import degenerate_replies as bench
from tests.support.degenerate import FAMILIES, FIELDS

pytestmark = pytest.mark.slow  # a worker process, amaris serve and a monitor process


@pytest.mark.usefixtures("shared_prefect")
def test_the_smoke_run_answers_every_case_and_exits_on_sigterm(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its temporary folders, and its worker processes', go here: none may be left behind.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert bench.main(["--smoke"]) == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("amaris-bench-")] == []
    printed = capsys.readouterr().out
    cases = len(FAMILIES) * len(FIELDS)
    row = re.search(
        rf"^\| 1,000 \| {cases} \| ([\d.]+) \((\w+), (\w+)\) \| ([\d.]+) \|$", printed, re.M
    )
    assert row is not None, printed  # no case past the cap
    answers = re.search(r"^Answers of the last request of each case: (\{.*\})\.$", printed, re.M)
    assert answers is not None
    found = ast.literal_eval(answers.group(1))
    assert sum(found.values()) == cases
    assert set(found) <= {"200 scored", "200 unscored"}
    verdicts = re.findall(r"^- \*\*(PASS|FAIL)\*\* (.+): (.+)\.$", printed, re.M)
    assert len(verdicts) == 4
    cpu = float(row.group(1))
    assert verdicts[0][0] == ("PASS" if cpu <= bench.TARGET_CPU_MS else "FAIL")
    assert verdicts[0][2] == f"{cpu:.1f} ms"
    assert re.search(r"SIGTERM under that load: exited after [\d.]+ s\.$", printed, re.M)
